//! The rule files as text: diagnostics with `file:line:col`, offsets of declarations, and RON
//! parse errors pointed at the place the fix goes.
use std::fmt;

/// One problem in the rules, pointing at the exact place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.message)
    }
}

/// A file's name as shown in diagnostics and its text.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: String,
    pub text: String,
}

impl Source {
    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
        (line, col)
    }

    pub(super) fn diag(&self, offset: usize, message: impl Into<String>) -> Diagnostic {
        let (line, col) = self.line_col(offset);
        Diagnostic { file: self.path.clone(), line, col, message: message.into() }
    }

    /// Offset of `needle` at or after `from`.
    pub(super) fn find(&self, from: usize, needle: &str) -> Option<usize> {
        self.text.get(from..)?.find(needle).map(|i| i + from)
    }

    /// Offset of the first character inside the string literal `"value"` found after `from`.
    pub(super) fn string_after(&self, from: usize, value: &str) -> Option<usize> {
        self.find(from, &format!("\"{value}\"")).map(|i| i + 1)
    }

    /// Offset of a declaration `field: "name"` (e.g. `id: "x"`), or 0.
    pub(super) fn decl(&self, field: &str, name: &str) -> usize {
        self.find(0, &format!("{field}: \"{name}\"")).unwrap_or(0)
    }
}

pub(super) fn parse_ron<T: serde::de::DeserializeOwned>(
    src: &Source,
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    // `implicit_some` lets optional fields be written plainly (`when: "..."`, not `Some("...")`).
    let options =
        ron::Options::default().with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME);
    match options.from_str::<T>(&src.text) {
        Ok(v) => Some(v),
        Err(e) => {
            let (line, col) = (e.span.start.line, e.span.start.col);
            diags.push(match token_before(&src.text, line, col) {
                // RON notices a missing `)`, `]` or `,` only at the next token, often a line
                // later: point at the end of the last token before it, where the fix goes.
                Some(offset) => {
                    let (l, c) = src.line_col(offset);
                    Diagnostic {
                        file: src.path.clone(),
                        line: l,
                        col: c,
                        message: format!(
                            "{} at line {line}:{col}: is a `,` or a closing `)` or `]` missing here?",
                            e.code
                        ),
                    }
                }
                None => Diagnostic {
                    file: src.path.clone(),
                    line,
                    col,
                    message: e.code.to_string(),
                },
            });
            None
        }
    }
}

/// The offset just after the last token before (`line`, `col`), if only whitespace and comments
/// that span a line break lie between them; `None` when the error is on that token's line.
fn token_before(text: &str, line: usize, col: usize) -> Option<usize> {
    let line_start: usize =
        text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    let offset = line_start
        + text
            .get(line_start..)?
            .chars()
            .take(col.saturating_sub(1))
            .map(char::len_utf8)
            .sum::<usize>();
    let mut before = text.get(..offset)?;
    let mut crossed = false;
    loop {
        let trimmed = before.trim_end();
        crossed |= before[trimmed.len()..].contains('\n');
        before = trimmed;
        // A comment at the end of `before` (outside any string) is skipped too.
        let last_line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let last_line = &before[last_line_start..];
        match comment_start(last_line) {
            Some(i) => before = &before[..last_line_start + i],
            None => break,
        }
    }
    (crossed && !before.is_empty()).then_some(before.len())
}

/// Where a `//` comment starts in `line`, outside string literals.
fn comment_start(line: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return Some(i),
            _ => {}
        }
    }
    None
}
