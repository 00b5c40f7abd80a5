//! Links from profiles to traces: the URL template of a tracing UI (Tempo in Grafana, Jaeger,
//! Zipkin) into which the web UI puts a span's `trace_id` (and `span_id`), as Grafana's
//! data-source links do. The server only checks the template; the UI fills it in.

use thiserror::Error;

/// The placeholders a template may hold; `{trace_id}` must be one of them.
pub const TRACE_URL_PLACEHOLDERS: [&str; 2] = ["{trace_id}", "{span_id}"];

/// Why a trace URL template was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TraceUrlTemplateError {
    /// Without `{trace_id}` every link would open the same page.
    #[error(
        "`{0}` has no `{{trace_id}}`: write where the trace id goes, e.g. http://jaeger:16686/trace/{{trace_id}}"
    )]
    NoTraceId(String),
    /// Only web pages: an http(s) URL, or a path on this server's host.
    #[error(
        "`{0}` is not an http(s) URL or a path starting with `/`: the UI opens it in the browser"
    )]
    NotAWebAddress(String),
    /// A brace pair that is not a known placeholder: a typo that would stay in every link.
    #[error(
        "`{template}` has the unknown placeholder `{placeholder}`: use {{trace_id}} or {{span_id}}"
    )]
    UnknownPlaceholder {
        /// The whole template.
        template: String,
        /// The unknown `{…}`.
        placeholder: String,
    },
}

/// Checks `template`, the value of `--web-trace-url-template`, and gives it back.
pub fn parse_trace_url_template(template: &str) -> Result<String, TraceUrlTemplateError> {
    let lower = template.to_ascii_lowercase();
    let web = lower.starts_with("http://")
        || lower.starts_with("https://")
        || (template.starts_with('/') && !template.starts_with("//"));
    if !web || template.chars().any(char::is_whitespace) {
        return Err(TraceUrlTemplateError::NotAWebAddress(template.to_owned()));
    }
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let placeholder = match rest[open..].find('}') {
            Some(close) => &rest[open..open + close + 1],
            None => &rest[open..],
        };
        if !TRACE_URL_PLACEHOLDERS.contains(&placeholder) {
            return Err(TraceUrlTemplateError::UnknownPlaceholder {
                template: template.to_owned(),
                placeholder: placeholder.to_owned(),
            });
        }
        rest = &rest[open + placeholder.len()..];
    }
    if !template.contains("{trace_id}") {
        return Err(TraceUrlTemplateError::NoTraceId(template.to_owned()));
    }
    Ok(template.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracing_uis_templates_are_taken() {
        for template in [
            "http://jaeger:16686/trace/{trace_id}",
            "https://grafana.example.com/explore?left=%7B%22queries%22:%5B%7B%22query%22:%22{trace_id}%22%7D%5D%7D",
            "/tempo/trace/{trace_id}?span={span_id}",
            "HTTPS://zipkin/zipkin/traces/{trace_id}",
        ] {
            assert_eq!(parse_trace_url_template(template).as_deref(), Ok(template));
        }
    }

    #[test]
    fn faults_are_named() {
        assert_eq!(
            parse_trace_url_template("http://jaeger/trace/"),
            Err(TraceUrlTemplateError::NoTraceId(
                "http://jaeger/trace/".into()
            ))
        );
        for not_web in [
            "jaeger/trace/{trace_id}",
            "//evil/{trace_id}",
            "javascript:{trace_id}",
            "http://a b/{trace_id}",
        ] {
            assert_eq!(
                parse_trace_url_template(not_web),
                Err(TraceUrlTemplateError::NotAWebAddress(not_web.into()))
            );
        }
        let err = parse_trace_url_template("http://jaeger/trace/{traceid}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`http://jaeger/trace/{traceid}` has the unknown placeholder `{traceid}`: use {trace_id} or {span_id}"
        );
        let err = parse_trace_url_template("http://jaeger/trace/{trace_id").unwrap_err();
        assert!(err.to_string().contains("placeholder `{trace_id`"), "{err}");
    }
}
