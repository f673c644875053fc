//! The allow-list format: one `<binary>::<test> <reason>` per line; `#` starts a comment line.

use std::collections::HashSet;

/// One allow-listed skip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `<binary>::<test>`.
    pub key: String,
    /// Why the skip is accepted (one line, never empty).
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("line {line}: {key:?} is not `<binary>::<test>`")]
    BadKey { line: usize, key: String },
    #[error("line {line}: {key} has no reason")]
    NoReason { line: usize, key: String },
    #[error("line {line}: {key} is listed twice")]
    Duplicate { line: usize, key: String },
}

/// Parses one allow-list.
pub fn parse(text: &str) -> Result<Vec<Entry>, ListError> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let (key, reason) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
        let (key, reason) = (key.to_owned(), reason.trim().to_owned());
        let well_formed = key
            .split_once("::")
            .is_some_and(|(bin, test)| !bin.is_empty() && !test.is_empty() && !bin.contains(':'));
        if !well_formed {
            return Err(ListError::BadKey { line, key });
        }
        if reason.is_empty() {
            return Err(ListError::NoReason { line, key });
        }
        if !seen.insert(key.clone()) {
            return Err(ListError::Duplicate { line, key });
        }
        out.push(Entry { key, reason });
    }
    Ok(out)
}
