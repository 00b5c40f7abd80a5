//! Tests of one part of a frame (its function's name, system name or file, its object file,
//! its address or line), as Parca's filter criteria write them: text compared without regard
//! to ASCII case. Stack filters ([`crate::StackFilter::frames`]) keep samples by them, frame
//! hiders ([`crate::FrameHider::keeping_frames`]) keep frames by them.

use crate::tables::{Line, LocationId, Tables};

/// A part of a frame that holds text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextField {
    /// The function's name.
    FunctionName,
    /// The function's system (mangled) name.
    SystemName,
    /// The function's source file.
    Filename,
    /// The base name of the location's object file.
    Binary,
}

/// How a text is compared (case-insensitively, as Parca compares).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextOp {
    /// The whole text equals the value.
    Equal,
    /// The whole text differs from the value.
    NotEqual,
    /// The text contains the value.
    Contains,
    /// The text does not contain the value.
    NotContains,
    /// The text starts with the value.
    StartsWith,
    /// The text does not start with the value.
    NotStartsWith,
}

impl TextOp {
    /// Whether it is one of the three "not" comparisons.
    pub fn is_negative(self) -> bool {
        matches!(
            self,
            TextOp::NotEqual | TextOp::NotContains | TextOp::NotStartsWith
        )
    }

    /// The positive comparison a negative one denies (itself when positive).
    pub fn positive(self) -> TextOp {
        match self {
            TextOp::NotEqual => TextOp::Equal,
            TextOp::NotContains => TextOp::Contains,
            TextOp::NotStartsWith => TextOp::StartsWith,
            op => op,
        }
    }
}

/// A part of a frame that holds a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberField {
    /// The location's address.
    Address,
    /// The line's number.
    LineNumber,
}

/// One test of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameTest {
    /// A text part compared with a value.
    Text {
        /// Which part.
        field: TextField,
        /// How.
        op: TextOp,
        /// The value, compared case-insensitively.
        value: String,
    },
    /// A number part, equal (or not) to a value.
    Number {
        /// Which part.
        field: NumberField,
        /// Equal when true, different when false.
        equal: bool,
        /// The value.
        value: u64,
    },
}

impl FrameTest {
    /// A text test.
    pub fn text(field: TextField, op: TextOp, value: &str) -> FrameTest {
        FrameTest::Text {
            field,
            op,
            value: value.to_ascii_lowercase(),
        }
    }

    /// Whether it looks at a location (object file, address) rather than at its lines.
    pub fn is_location_test(&self) -> bool {
        matches!(
            self,
            FrameTest::Text {
                field: TextField::Binary,
                ..
            } | FrameTest::Number {
                field: NumberField::Address,
                ..
            }
        )
    }

    /// The test of a location's own parts (object file, address); `None` for a test of lines.
    /// A location without an object file passes an object-file test, as in Parca.
    pub(crate) fn on_location(&self, tables: &Tables, id: LocationId) -> Option<bool> {
        match self {
            FrameTest::Text {
                field: TextField::Binary,
                op,
                value,
            } => Some(
                tables.location_address(id).mapping.is_none()
                    || compare(*op, tables.location_binary(id), value),
            ),
            FrameTest::Number {
                field: NumberField::Address,
                equal,
                value,
            } => Some((tables.location_address(id).address == *value) == *equal),
            _ => None,
        }
    }

    /// The test of one line (function name, system name, file, line number); `None` for a
    /// test of locations.
    pub(crate) fn on_line(&self, tables: &Tables, line: &Line) -> Option<bool> {
        let function = tables.function(line.function);
        match self {
            FrameTest::Text { field, op, value } => {
                let text = match field {
                    TextField::FunctionName => function.name,
                    TextField::SystemName => function.system_name,
                    TextField::Filename => function.filename,
                    TextField::Binary => return None,
                };
                Some(compare(*op, tables.string(text), value))
            }
            FrameTest::Number {
                field: NumberField::LineNumber,
                equal,
                value,
            } => Some((u64::try_from(line.line).ok() == Some(*value)) == *equal),
            FrameTest::Number { .. } => None,
        }
    }
}

/// `text` compared with `value` (already lowercase) by `op`, ignoring ASCII case.
fn compare(op: TextOp, text: &str, value: &str) -> bool {
    let text = text.to_ascii_lowercase();
    let hit = match op.positive() {
        TextOp::Equal => text == value,
        TextOp::Contains => text.contains(value),
        _ => text.starts_with(value),
    };
    hit != op.is_negative()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_compared_without_case() {
        assert!(compare(TextOp::Contains, "runtime.MallocGC", "mallocgc"));
        assert!(compare(TextOp::Equal, "Main", "main"));
        assert!(!compare(TextOp::NotEqual, "Main", "main"));
        assert!(compare(TextOp::StartsWith, "net/http.serve", "net/"));
        assert!(compare(TextOp::NotStartsWith, "main", "net/"));
        assert!(compare(TextOp::NotContains, "main", "x"));
        assert_eq!(
            FrameTest::text(TextField::Binary, TextOp::Equal, "LibC.so"),
            FrameTest::Text {
                field: TextField::Binary,
                op: TextOp::Equal,
                value: "libc.so".into()
            }
        );
    }
}
