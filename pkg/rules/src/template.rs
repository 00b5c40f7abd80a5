//! Alerting rules' labels and annotations: Go templates expanded as Prometheus expands them.
//!
//! The text gets Prometheus' prefix, `{{$labels := .Labels}}{{$externalLabels :=
//! .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}`, so `{{ $labels.job }}`,
//! `{{ $value }}`, `{{ .Labels.job }}` and `{{ .Value }}` all work; a missing label reads as
//! the empty string (Prometheus' `missingkey=zero`). Prometheus' formatting functions are
//! there (`humanize`, `humanize1024`, `humanizeDuration`, `humanizePercentage`,
//! `humanizeTimestamp`, `toUpper`, `toLower`, `title`, `match`, `reReplaceAll`, `stripPort`,
//! `stripDomain`), beside Go's own (`printf`, `len`, `index`, `eq`, `and`, …), and its query
//! functions: `query "expr"` evaluates a profile query at the rule's evaluation time (as
//! Prometheus' template `query` does) and gives its samples, each with `.Labels` and `.Value`;
//! `first`, `label "name"`, `value`, `strvalue` and `sortByLabel "name"` take them apart, so
//! `{{ with query "sum(…)" }}{{ . | first | value | humanize }}{{ end }}` works as in a
//! Prometheus rule.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gtmpl::{Context, FuncError, Template, Value};

/// Evaluates a query for a template's `query` function, at the rule's evaluation time: the
/// result's samples (labels, value), or why it failed.
pub type QueryFn =
    Arc<dyn Fn(&str) -> Result<Vec<(BTreeMap<String, String>, f64)>, String> + Send + Sync>;

thread_local! {
    /// The query function of the template being rendered on this thread (gtmpl's functions
    /// are plain `fn`s: they can take nothing else along).
    static QUERY: RefCell<Option<QueryFn>> = const { RefCell::new(None) };
}

/// What a template sees: the alert's labels and value, and the server's external labels and
/// URL.
#[derive(Clone, Copy)]
pub struct TemplateData<'a> {
    /// The alert's labels (the sample's, before the rule's own are added).
    pub labels: &'a BTreeMap<String, String>,
    /// The sample's value.
    pub value: f64,
    /// `global.external_labels`.
    pub external_labels: &'a BTreeMap<String, String>,
    /// The URL the server is reached at (`--web-external-url`), or empty.
    pub external_url: &'a str,
    /// What `query` evaluates with; `None`: templates cannot query (the function says so).
    pub query: Option<&'a QueryFn>,
}

impl std::fmt::Debug for TemplateData<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateData")
            .field("labels", &self.labels)
            .field("value", &self.value)
            .field("query", &self.query.is_some())
            .finish_non_exhaustive()
    }
}

/// Prometheus' prefix: the variables every rule template may use.
const PREFIX: &str = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}";

/// Expands `text` (a label's or annotation's template) for one alert. An error names what
/// failed (a syntax error, an unknown function, a function's bad argument).
pub fn expand(name: &str, text: &str, data: &TemplateData<'_>) -> Result<String, String> {
    if !text.contains("{{") {
        return Ok(text.to_owned());
    }
    let mut template = Template::with_name(name);
    template.add_funcs(FUNCS);
    template
        .parse(format!("{PREFIX}{text}"))
        .map_err(|e| format!("template `{name}`: {e}"))?;
    let map = |m: &BTreeMap<String, String>| {
        Value::Map(
            m.iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect::<HashMap<_, _>>(),
        )
    };
    let context = Value::Object(HashMap::from([
        ("Labels".to_owned(), map(data.labels)),
        ("ExternalLabels".to_owned(), map(data.external_labels)),
        ("ExternalURL".to_owned(), Value::from(data.external_url)),
        ("Value".to_owned(), Value::from(data.value)),
    ]));
    let previous = QUERY.with(|q| q.replace(data.query.cloned()));
    let rendered = template.render(&Context::from(context));
    QUERY.with(|q| *q.borrow_mut() = previous);
    let out = rendered.map_err(|e| format!("template `{name}`: {e}"))?;
    // A missing map key reads as gtmpl's `<no value>`; Prometheus expands with
    // `missingkey=zero`, where a missing label is the empty string. Text that writes
    // `<no value>` itself is left alone.
    Ok(if text.contains(NO_VALUE) {
        out
    } else {
        out.replace(NO_VALUE, "")
    })
}

/// What gtmpl prints for a missing map key.
const NO_VALUE: &str = "<no value>";

/// Prometheus' template functions that need no store.
const FUNCS: &[(&str, gtmpl::Func)] = &[
    ("humanize", humanize),
    ("humanize1024", humanize1024),
    ("humanizeDuration", humanize_duration),
    ("humanizePercentage", humanize_percentage),
    ("humanizeTimestamp", humanize_timestamp),
    ("toUpper", to_upper),
    ("toLower", to_lower),
    ("title", title),
    ("match", match_fn),
    ("reReplaceAll", re_replace_all),
    ("stripPort", strip_port),
    ("stripDomain", strip_domain),
    ("query", query),
    ("first", first),
    ("label", label),
    ("value", value),
    ("strvalue", strvalue),
    ("sortByLabel", sort_by_label),
    // Go compares numbers of one kind; gtmpl reads `5.0` as an integer and cannot compare it
    // with a float such as `$value`. Numbers are compared as floats here, as Go would
    // compare `$value` with `5.0`.
    ("eq", eq),
    ("ne", ne),
    ("lt", lt),
    ("le", le),
    ("gt", gt),
    ("ge", ge),
];

/// A sample as templates see it: `.Labels` and `.Value`.
fn sample_value(labels: BTreeMap<String, String>, value: f64) -> Value {
    Value::Object(HashMap::from([
        (
            "Labels".to_owned(),
            Value::Map(
                labels
                    .into_iter()
                    .map(|(k, v)| (k, Value::from(v)))
                    .collect(),
            ),
        ),
        ("Value".to_owned(), Value::from(value)),
    ]))
}

/// `query "expr"`: the samples of a profile query at the evaluation time.
fn query(args: &[Value]) -> Result<Value, FuncError> {
    let [expr] = string_args::<1>("query", args)?;
    let run = QUERY
        .with(|q| q.borrow().clone())
        .ok_or_else(|| FuncError::Generic("query: templates here cannot query".into()))?;
    let samples = run(&expr).map_err(|e| FuncError::Generic(format!("query `{expr}`: {e}")))?;
    Ok(Value::Array(
        samples
            .into_iter()
            .map(|(labels, value)| sample_value(labels, value))
            .collect(),
    ))
}

/// The one sample argument's field `field` (`Labels` or `Value`).
fn sample_field<'v>(name: &str, sample: &'v Value, field: &str) -> Result<&'v Value, FuncError> {
    match sample {
        Value::Object(fields) | Value::Map(fields) => fields
            .get(field)
            .ok_or_else(|| FuncError::Generic(format!("{name}: `{sample}` is no sample"))),
        other => Err(FuncError::Generic(format!(
            "{name}: `{other}` is no sample"
        ))),
    }
}

/// `first`: the first sample of a query's result (an error when there is none, as
/// Prometheus').
fn first(args: &[Value]) -> Result<Value, FuncError> {
    match args {
        [Value::Array(samples)] => samples
            .first()
            .cloned()
            .ok_or_else(|| FuncError::Generic("first() called on vector with no elements".into())),
        [other] => Err(FuncError::Generic(format!("first: `{other}` is no list"))),
        _ => Err(FuncError::ExactlyXArgs("first".into(), 1)),
    }
}

/// `label "name" sample`: the sample's label `name` (empty when it has none).
fn label(args: &[Value]) -> Result<Value, FuncError> {
    let [Value::String(name), sample] = args else {
        return Err(FuncError::Generic(
            "label: wants a label name and a sample".into(),
        ));
    };
    match sample_field("label", sample, "Labels")? {
        Value::Map(labels) | Value::Object(labels) => {
            Ok(labels.get(name).cloned().unwrap_or_else(|| Value::from("")))
        }
        other => Err(FuncError::Generic(format!(
            "label: `{other}` has no labels"
        ))),
    }
}

/// `value`: the sample's value.
fn value(args: &[Value]) -> Result<Value, FuncError> {
    let [sample] = args else {
        return Err(FuncError::ExactlyXArgs("value".into(), 1));
    };
    sample_field("value", sample, "Value").cloned()
}

/// `strvalue`: the sample's `__value__` label (what Prometheus gives for a string result).
fn strvalue(args: &[Value]) -> Result<Value, FuncError> {
    let [sample] = args else {
        return Err(FuncError::ExactlyXArgs("strvalue".into(), 1));
    };
    label(&[Value::from("__value__"), sample.clone()])
}

/// `sortByLabel "name" samples`: the samples ordered by their label `name`.
fn sort_by_label(args: &[Value]) -> Result<Value, FuncError> {
    let [Value::String(name), Value::Array(samples)] = args else {
        return Err(FuncError::Generic(
            "sortByLabel: wants a label name and a query's result".into(),
        ));
    };
    let mut keyed = samples
        .iter()
        .map(|s| {
            let key = label(&[Value::from(name.as_str()), s.clone()])?.to_string();
            Ok((key, s.clone()))
        })
        .collect::<Result<Vec<_>, FuncError>>()?;
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Value::Array(keyed.into_iter().map(|(_, s)| s).collect()))
}

/// A number argument as a float, whatever gtmpl's kind of number.
fn as_float(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .or_else(|| n.as_i64().map(|i| i as f64))
            .or_else(|| n.as_u64().map(|u| u as f64)),
        _ => None,
    }
}

/// Both arguments as floats, when both are numbers.
fn two_floats(args: &[Value]) -> Option<(f64, f64)> {
    match args {
        [a, b] => Some((as_float(a)?, as_float(b)?)),
        _ => None,
    }
}

fn eq(args: &[Value]) -> Result<Value, FuncError> {
    match args.split_first() {
        Some((first, rest)) if !rest.is_empty() => {
            if let Some(x) = as_float(first)
                && rest.iter().all(|v| as_float(v).is_some())
            {
                return Ok(Value::from(rest.iter().any(|v| as_float(v) == Some(x))));
            }
            gtmpl::funcs::eq(args)
        }
        _ => gtmpl::funcs::eq(args),
    }
}

fn ne(args: &[Value]) -> Result<Value, FuncError> {
    match two_floats(args) {
        Some((a, b)) => Ok(Value::from(a != b)),
        None => gtmpl::funcs::ne(args),
    }
}

fn lt(args: &[Value]) -> Result<Value, FuncError> {
    match two_floats(args) {
        Some((a, b)) => Ok(Value::from(a < b)),
        None => gtmpl::funcs::lt(args),
    }
}

fn le(args: &[Value]) -> Result<Value, FuncError> {
    match two_floats(args) {
        Some((a, b)) => Ok(Value::from(a <= b)),
        None => gtmpl::funcs::le(args),
    }
}

fn gt(args: &[Value]) -> Result<Value, FuncError> {
    match two_floats(args) {
        Some((a, b)) => Ok(Value::from(a > b)),
        None => gtmpl::funcs::gt(args),
    }
}

fn ge(args: &[Value]) -> Result<Value, FuncError> {
    match two_floats(args) {
        Some((a, b)) => Ok(Value::from(a >= b)),
        None => gtmpl::funcs::ge(args),
    }
}

/// The one argument of a function, as a number (Prometheus' `convertToFloat`: numbers and
/// numeric strings).
fn number_arg(name: &str, args: &[Value]) -> Result<f64, FuncError> {
    let [arg] = args else {
        return Err(FuncError::ExactlyXArgs(name.into(), 1));
    };
    if let Some(v) = as_float(arg) {
        return Ok(v);
    }
    match arg {
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| FuncError::Generic(format!("{name}: `{s}` is not a number"))),
        other => Err(FuncError::Generic(format!(
            "{name}: `{other}` is not a number"
        ))),
    }
}

/// The string arguments of a function, exactly `N` of them.
fn string_args<const N: usize>(name: &str, args: &[Value]) -> Result<[String; N], FuncError> {
    if args.len() != N {
        return Err(FuncError::ExactlyXArgs(name.into(), N));
    }
    Ok(std::array::from_fn(|i| match &args[i] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }))
}

fn humanize(args: &[Value]) -> Result<Value, FuncError> {
    let v = number_arg("humanize", args)?;
    Ok(Value::from(humanize_si(v)))
}

fn humanize1024(args: &[Value]) -> Result<Value, FuncError> {
    let mut v = number_arg("humanize1024", args)?;
    if v.abs() <= 1.0 || !v.is_finite() {
        return Ok(Value::from(go_g4(v)));
    }
    let mut prefix = "";
    for p in ["ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"] {
        if v.abs() < 1024.0 {
            break;
        }
        prefix = p;
        v /= 1024.0;
    }
    Ok(Value::from(format!("{}{prefix}", go_g4(v))))
}

fn humanize_duration(args: &[Value]) -> Result<Value, FuncError> {
    let v = number_arg("humanizeDuration", args)?;
    Ok(Value::from(duration_text(v)))
}

fn humanize_percentage(args: &[Value]) -> Result<Value, FuncError> {
    let v = number_arg("humanizePercentage", args)?;
    Ok(Value::from(format!("{}%", go_g4(v * 100.0))))
}

fn humanize_timestamp(args: &[Value]) -> Result<Value, FuncError> {
    let v = number_arg("humanizeTimestamp", args)?;
    if !v.is_finite() {
        return Ok(Value::from(go_g4(v)));
    }
    let nanos = (v * 1e9).round() as i128;
    let text = jiff::Timestamp::from_nanosecond(nanos)
        .map(|t| {
            // Go's time.Time String(): `2006-01-02 15:04:05.999999999 +0000 UTC`.
            let base = t.strftime("%Y-%m-%d %H:%M:%S").to_string();
            let frac = t.subsec_nanosecond();
            let frac = if frac == 0 {
                String::new()
            } else {
                format!(".{frac:09}").trim_end_matches('0').to_owned()
            };
            format!("{base}{frac} +0000 UTC")
        })
        .map_err(|e| FuncError::Generic(format!("humanizeTimestamp: {e}")))?;
    Ok(Value::from(text))
}

fn to_upper(args: &[Value]) -> Result<Value, FuncError> {
    let [s] = string_args("toUpper", args)?;
    Ok(Value::from(s.to_uppercase()))
}

fn to_lower(args: &[Value]) -> Result<Value, FuncError> {
    let [s] = string_args("toLower", args)?;
    Ok(Value::from(s.to_lowercase()))
}

/// Go's `strings.Title`: the first letter of each word in upper case.
fn title(args: &[Value]) -> Result<Value, FuncError> {
    let [s] = string_args("title", args)?;
    let mut out = String::with_capacity(s.len());
    let mut at_start = true;
    for c in s.chars() {
        if at_start && c.is_alphanumeric() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        at_start = !(c.is_alphanumeric() || c == '_' || c == '\'');
    }
    Ok(Value::from(out))
}

fn regex_of(name: &str, pattern: &str) -> Result<regex::Regex, FuncError> {
    regex::Regex::new(pattern)
        .map_err(|e| FuncError::Generic(format!("{name}: bad pattern `{pattern}`: {e}")))
}

/// `match PATTERN TEXT`: whether the (unanchored) pattern matches.
fn match_fn(args: &[Value]) -> Result<Value, FuncError> {
    let [pattern, text] = string_args("match", args)?;
    Ok(Value::from(regex_of("match", &pattern)?.is_match(&text)))
}

/// `reReplaceAll PATTERN REPLACEMENT TEXT`, with Go's `$1` references.
fn re_replace_all(args: &[Value]) -> Result<Value, FuncError> {
    let [pattern, replacement, text] = string_args("reReplaceAll", args)?;
    let re = regex_of("reReplaceAll", &pattern)?;
    Ok(Value::from(
        re.replace_all(&text, replacement.as_str()).into_owned(),
    ))
}

/// `host:port` → `host` (`[::1]:80` → `::1`); text without a port is kept.
fn strip_port(args: &[Value]) -> Result<Value, FuncError> {
    let [hostport] = string_args("stripPort", args)?;
    let host = match hostport.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
            host.trim_start_matches('[').trim_end_matches(']')
        }
        _ => hostport.as_str(),
    };
    Ok(Value::from(host))
}

/// `host.example.com:80` → `host:80`.
fn strip_domain(args: &[Value]) -> Result<Value, FuncError> {
    let [hostport] = string_args("stripDomain", args)?;
    let (host, port) = match hostport.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => (host, Some(port)),
        _ => (hostport.as_str(), None),
    };
    let host = if host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[') {
        host
    } else {
        host.split('.').next().unwrap_or(host)
    };
    Ok(Value::from(match port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }))
}

/// Prometheus' `humanize`: SI prefixes (`k`, `M`, … and `m`, `u`, …), four significant digits.
pub fn humanize_si(mut v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return go_g4(v);
    }
    let mut prefix = "";
    if v.abs() >= 1.0 {
        for p in ["k", "M", "G", "T", "P", "E", "Z", "Y"] {
            if v.abs() < 1000.0 {
                break;
            }
            prefix = p;
            v /= 1000.0;
        }
    } else {
        for p in ["m", "u", "n", "p", "f", "a", "z", "y"] {
            if v.abs() >= 1.0 {
                break;
            }
            prefix = p;
            v *= 1000.0;
        }
    }
    format!("{}{prefix}", go_g4(v))
}

/// Prometheus' `humanizeDuration` of seconds: `1d 2h 3m 4s`, or `1.5s`, `250ms`.
fn duration_text(mut v: f64) -> String {
    if !v.is_finite() {
        return go_g4(v);
    }
    if v == 0.0 {
        return format!("{}s", go_g4(v));
    }
    if v.abs() >= 1.0 {
        let sign = if v < 0.0 { "-" } else { "" };
        v = v.abs();
        let whole = v as i64;
        let (seconds, minutes) = (whole % 60, (whole / 60) % 60);
        let (hours, days) = ((whole / 3600) % 24, whole / 86_400);
        return if days != 0 {
            format!("{sign}{days}d {hours}h {minutes}m {seconds}s")
        } else if hours != 0 {
            format!("{sign}{hours}h {minutes}m {seconds}s")
        } else if minutes != 0 {
            format!("{sign}{minutes}m {seconds}s")
        } else {
            format!("{sign}{}s", go_g4(v))
        };
    }
    let mut prefix = "";
    for p in ["m", "u", "n", "p", "f", "a", "z", "y"] {
        if v.abs() >= 1.0 {
            break;
        }
        prefix = p;
        v *= 1000.0;
    }
    format!("{}{prefix}s", go_g4(v))
}

/// Go's `fmt.Sprintf("%.4g", v)`: four significant digits, trailing zeros dropped, exponent
/// form (`1.235e+05`) when the exponent is below -4 or at least 4.
pub fn go_g4(v: f64) -> String {
    const PRECISION: i32 = 4;
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, v);
    let (mantissa, exponent) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (PRECISION - 1 - exponent).max(0) as usize;
        trim_zeros(&format!("{v:.decimals$}")).to_owned()
    }
}

/// `1.500` → `1.5`, `2.000` → `2`; text without a point is kept.
fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Go's `strconv.FormatFloat(v, 'e', -1, 64)`, as Prometheus writes an alert's value in its
/// API: the shortest exponent form, `2.7e-01`, `1e+00`.
pub fn go_e(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let sci = format!("{v:e}");
    let (mantissa, exponent) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, value: f64) -> Result<String, String> {
        let labels = BTreeMap::from([
            ("job".to_owned(), "api".to_owned()),
            ("instance".to_owned(), "web-1.example.com:8080".to_owned()),
        ]);
        let external = BTreeMap::from([("region".to_owned(), "eu".to_owned())]);
        expand(
            "summary",
            text,
            &TemplateData {
                labels: &labels,
                value,
                external_labels: &external,
                external_url: "http://parca:7070",
                query: None,
            },
        )
    }

    #[test]
    fn query_functions_take_a_querys_samples_apart() {
        let labels = BTreeMap::new();
        let external = BTreeMap::new();
        let query: QueryFn = Arc::new(|expr: &str| match expr {
            "up" => Ok(vec![
                (BTreeMap::from([("job".to_owned(), "b".to_owned())]), 2.0),
                (BTreeMap::from([("job".to_owned(), "a".to_owned())]), 1500.0),
            ]),
            "none" => Ok(Vec::new()),
            _ => Err("parse error at 1:1".to_owned()),
        });
        let with_query = |text: &str| {
            expand(
                "summary",
                text,
                &TemplateData {
                    labels: &labels,
                    value: 0.0,
                    external_labels: &external,
                    external_url: "",
                    query: Some(&query),
                },
            )
        };
        assert_eq!(
            with_query(r#"{{ with query "up" }}{{ . | first | value | humanize }}{{ end }}"#)
                .unwrap(),
            "2"
        );
        assert_eq!(
            with_query(
                r#"{{ range query "up" | sortByLabel "job" }}{{ label "job" . }}={{ .Value }} {{ end }}"#
            )
            .unwrap(),
            "a=1500 b=2 "
        );
        assert_eq!(
            with_query(r#"{{ with query "up" }}{{ (first .).Labels.job }}{{ end }}"#).unwrap(),
            "b"
        );
        let empty = with_query(r#"{{ query "none" | first }}"#).unwrap_err();
        assert!(empty.contains("no elements"), "{empty}");
        let bad = with_query(r#"{{ query "x" }}"#).unwrap_err();
        assert!(bad.contains("query `x`: parse error"), "{bad}");
        let none = run(r#"{{ query "up" }}"#, 0.0).unwrap_err();
        assert!(none.contains("cannot query"), "{none}");
    }

    #[test]
    fn variables_as_prometheus_names_them() {
        assert_eq!(run("plain text", 1.0).unwrap(), "plain text");
        assert_eq!(
            run(
                "{{ $labels.job }} on {{ .Labels.instance }} is at {{ $value }}",
                0.5
            )
            .unwrap(),
            "api on web-1.example.com:8080 is at 0.5"
        );
        assert_eq!(
            run("{{ $externalLabels.region }} {{ $externalURL }}", 0.0).unwrap(),
            "eu http://parca:7070"
        );
        assert_eq!(run("[{{ $labels.missing }}]", 0.0).unwrap(), "[]");
        assert_eq!(
            run("{{ printf \"%.2f\" $value }}", 0.123_456).unwrap(),
            "0.12"
        );
    }

    #[test]
    fn prometheus_functions() {
        assert_eq!(
            run("{{ $value | humanize }}", 1_234_567.0).unwrap(),
            "1.235M"
        );
        assert_eq!(run("{{ humanize $value }}", 0.001_234).unwrap(), "1.234m");
        assert_eq!(run("{{ humanize1024 $value }}", 2048.0).unwrap(), "2ki");
        assert_eq!(
            run("{{ humanizeDuration $value }}", 93_784.0).unwrap(),
            "1d 2h 3m 4s"
        );
        assert_eq!(run("{{ humanizeDuration $value }}", 0.25).unwrap(), "250ms");
        assert_eq!(
            run("{{ humanizePercentage $value }}", 0.4321).unwrap(),
            "43.21%"
        );
        assert_eq!(
            run("{{ humanizeTimestamp $value }}", 1_435_065_584.128).unwrap(),
            "2015-06-23 13:19:44.128 +0000 UTC"
        );
        assert_eq!(
            run("{{ $labels.job | toUpper }} {{ title \"hot path\" }}", 0.0).unwrap(),
            "API Hot Path"
        );
        assert_eq!(
            run(
                "{{ stripPort $labels.instance }} {{ stripDomain $labels.instance }}",
                0.0
            )
            .unwrap(),
            "web-1.example.com web-1:8080"
        );
        assert_eq!(
            run(
                "{{ if match \"^web\" $labels.instance }}web{{ end }} {{ reReplaceAll \"(.*)-1\" \"$1\" \"web-1\" }}",
                0.0
            )
            .unwrap(),
            "web web"
        );
        for (v, want) in [(4.5, "ticket"), (6.0, "page"), (5.0, "ticket")] {
            assert_eq!(
                run("{{ if gt $value 5.0 }}page{{ else }}ticket{{ end }}", v).unwrap(),
                want
            );
        }
        assert_eq!(
            run("{{ if eq $labels.job \"api\" }}yes{{ end }}", 0.0).unwrap(),
            "yes"
        );
    }

    #[test]
    fn faults_are_named() {
        let err = run("{{ nosuch $value }}", 1.0).unwrap_err();
        assert!(err.starts_with("template `summary`"), "{err}");
        assert!(err.contains("nosuch"), "{err}");
    }

    #[test]
    fn go_number_formats() {
        assert_eq!(go_g4(1.0), "1");
        assert_eq!(go_g4(123_456.0), "1.235e+05");
        assert_eq!(go_g4(0.000_012_34), "1.234e-05");
        assert_eq!(go_g4(12.5), "12.5");
        assert_eq!(go_e(1.0), "1e+00");
        assert_eq!(go_e(0.27), "2.7e-01");
        assert_eq!(go_e(1234.0), "1.234e+03");
        assert_eq!(humanize_si(0.0), "0");
    }
}
