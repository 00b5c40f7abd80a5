//! Values in human units, as google/pprof prints them: `5.31s`, `940ms`, `12.50MB`, plain
//! counts. Each value is scaled on its own to the largest unit it is at least one of.

/// How a table prints its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueStyle {
    /// In human units: `5.31s`, `12.50MB` (see [`human`]).
    #[default]
    Human,
    /// As stored, integers in the sample type's unit: for scripts.
    Raw,
}

impl ValueStyle {
    /// `value` (in `unit`) in this style.
    pub fn format(self, value: i64, unit: &str) -> String {
        match self {
            ValueStyle::Human => human(value, unit),
            ValueStyle::Raw => value.to_string(),
        }
    }
}

/// A unit a value can be scaled to: its printed name and how many base units it is.
struct Unit {
    name: &'static str,
    aliases: &'static [&'static str],
    factor: f64,
}

/// Memory (base: bytes, powers of 1024) and time (base: nanoseconds), as google/pprof has them.
const UNIT_TYPES: [&[Unit]; 2] = [
    &[
        Unit {
            name: "B",
            aliases: &["b", "byte"],
            factor: 1.0,
        },
        Unit {
            name: "kB",
            aliases: &["kb", "kbyte", "kilobyte"],
            factor: 1024.0,
        },
        Unit {
            name: "MB",
            aliases: &["mb", "mbyte", "megabyte"],
            factor: 1048576.0,
        },
        Unit {
            name: "GB",
            aliases: &["gb", "gbyte", "gigabyte"],
            factor: 1073741824.0,
        },
        Unit {
            name: "TB",
            aliases: &["tb", "tbyte", "terabyte"],
            factor: 1099511627776.0,
        },
        Unit {
            name: "PB",
            aliases: &["pb", "pbyte", "petabyte"],
            factor: 1125899906842624.0,
        },
    ],
    &[
        Unit {
            name: "ns",
            aliases: &["ns", "nanosecond"],
            factor: 1.0,
        },
        Unit {
            name: "us",
            aliases: &["μs", "us", "microsecond"],
            factor: 1e3,
        },
        Unit {
            name: "ms",
            aliases: &["ms", "millisecond"],
            factor: 1e6,
        },
        Unit {
            name: "s",
            aliases: &["s", "sec", "second"],
            factor: 1e9,
        },
        Unit {
            name: "hrs",
            aliases: &["hour", "hr"],
            factor: 3.6e12,
        },
    ],
];

/// `value`, measured in `unit` (a pprof sample type's unit, such as `nanoseconds` or `bytes`),
/// in the largest unit of its kind that it is at least one of, with two decimals (`.00`
/// dropped): google/pprof's `measurement.Label`. Units of no known kind (counts, samples) print
/// the number alone.
pub fn human(value: i64, unit: &str) -> String {
    if value < 0 && value != i64::MIN {
        let positive = human(-value, unit);
        return if positive == "0" {
            positive
        } else {
            format!("-{positive}")
        };
    }
    let (scaled, name) = scale(value, unit);
    let text = format!("{scaled:.2}");
    let text = text.strip_suffix(".00").unwrap_or(&text);
    if text == "0" || text == "-0" {
        return "0".to_owned();
    }
    format!("{text}{name}")
}

fn scale(value: i64, unit: &str) -> (f64, &'static str) {
    let mut sniffed = unit.to_lowercase();
    if sniffed.len() > 2 && sniffed.ends_with('s') {
        sniffed.pop();
    }
    for units in UNIT_TYPES {
        let Some(from) = units.iter().find(|u| u.aliases.contains(&sniffed.as_str())) else {
            continue;
        };
        let base = value as f64 * from.factor;
        let best = units
            .iter()
            .filter(|u| base / u.factor >= 1.0)
            .max_by(|a, b| a.factor.total_cmp(&b.factor));
        return match best {
            Some(u) => (base / u.factor, u.name),
            // Below one of the smallest unit (zero): the smallest.
            None => (base / units[0].factor, units[0].name),
        };
    }
    (value as f64, "")
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn scales_as_google_pprof() {
        assert_eq!(human(240_290_000_000, "nanoseconds"), "240.29s");
        assert_eq!(human(940_000_000, "nanoseconds"), "940ms");
        assert_eq!(human(1_500, "nanoseconds"), "1.50us");
        assert_eq!(human(7_200_000_000_000, "nanoseconds"), "2hrs");
        assert_eq!(human(13_107_200, "bytes"), "12.50MB");
        assert_eq!(human(512, "bytes"), "512B");
        assert_eq!(human(3, "count"), "3");
        assert_eq!(human(0, "nanoseconds"), "0");
        assert_eq!(human(-940_000_000, "nanoseconds"), "-940ms");
        assert_eq!(human(10, "milliseconds"), "10ms");
    }
}
