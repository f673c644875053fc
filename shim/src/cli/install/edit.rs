//! Edits of a user's containerd config.toml, each with its exact reversal. Edits are textual
//! where they can be (everything the user wrote stays byte for byte), and every result is
//! parsed again before it is used.

use serde::{Deserialize, Serialize};

use super::detect::rund_table;

pub const BEGIN: &str = "# BEGIN rund: added by `rund install`; `rund uninstall` removes it";
pub const END: &str = "# END rund";
const IMPORT_NOTE: &str = "# Added by `rund install`; `rund uninstall` removes it.";

/// One change `rund install` made to config.toml, recorded so uninstall can undo exactly it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Edit {
    /// The text appended: the runtime tables between [`BEGIN`] and [`END`] (containerd 1.x).
    AppendedBlock { block: String },
    /// The text inserted before the first table: a note and an `imports = [...]` line.
    InsertedImports { lines: String },
    /// One element pushed onto an existing `imports` list.
    AddedImport { import: String },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EditError {
    #[error("the edited config is not valid TOML ({0})")]
    Invalid(String),
    #[error("the edited config does not have {0}")]
    Missing(String),
    #[error("the part `rund install` added is no longer there as it was written ({0})")]
    Changed(String),
}

fn parse(text: &str) -> Result<toml::Table, EditError> {
    toml::from_str(text).map_err(|e| EditError::Invalid(e.to_string().trim().to_owned()))
}

/// The block appended to a 1.x config.toml.
pub fn block(tables: &str) -> String {
    format!("{BEGIN}\n{tables}{END}\n")
}

/// Append the runtime `tables` to `text`; the result must register `rund`.
pub fn append_block(text: &str, tables: &str) -> Result<(String, Edit), EditError> {
    let mut added = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        added.push('\n');
    }
    if !text.is_empty() {
        added.push('\n');
    }
    added.push_str(&block(tables));
    let out = format!("{text}{added}");
    if rund_table(&parse(&out)?).is_none() {
        return Err(EditError::Missing("the rund runtime table".into()));
    }
    Ok((out, Edit::AppendedBlock { block: added }))
}

/// Add `import` to `imports`: a new line before the first table when there is no `imports`,
/// else one more element of the existing list.
pub fn add_import(text: &str, import: &str) -> Result<(String, Edit), EditError> {
    let table = parse(text)?;
    let quoted = toml::Value::String(import.to_owned()).to_string();
    let out;
    let edit;
    if table.contains_key("imports") {
        let mut doc: toml_edit::DocumentMut = text
            .parse()
            .map_err(|e: toml_edit::TomlError| EditError::Invalid(e.to_string()))?;
        let arr = doc["imports"]
            .as_array_mut()
            .ok_or_else(|| EditError::Missing("`imports` as a list".into()))?;
        arr.push(import);
        out = doc.to_string();
        edit = Edit::AddedImport {
            import: import.to_owned(),
        };
    } else {
        let at = first_table_offset(text);
        let (head, tail) = text.split_at(at);
        let mut lines = String::new();
        if !head.is_empty() && !head.ends_with('\n') {
            lines.push('\n');
        }
        lines.push_str(&format!("{IMPORT_NOTE}\nimports = [{quoted}]\n"));
        if !tail.is_empty() {
            lines.push('\n');
        }
        out = format!("{head}{lines}{tail}");
        edit = Edit::InsertedImports { lines };
    }
    let has = parse(&out)?
        .get("imports")
        .and_then(|i| i.as_array())
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(import)));
    if !has {
        return Err(EditError::Missing(format!("imports entry {quoted}")));
    }
    Ok((out, edit))
}

/// Byte offset of the first line that opens a table (`[x]` or `[[x]]`) outside a multi-line
/// value; the end of the text when there is none.
fn first_table_offset(text: &str) -> usize {
    let mut off = 0;
    let mut depth = 0i32;
    let mut in_ml_string = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        if depth == 0 && !in_ml_string && t.starts_with('[') {
            return off;
        }
        in_ml_string ^= (line.matches("\"\"\"").count() + line.matches("'''").count()) % 2 == 1;
        if !in_ml_string {
            let code = line.split('#').next().unwrap_or("");
            if let Some(v) = code.split_once('=').map(|(_, v)| v) {
                depth += v.matches('[').count() as i32 - v.matches(']').count() as i32;
            } else if depth > 0 {
                depth += code.matches('[').count() as i32 - code.matches(']').count() as i32;
            }
            depth = depth.max(0);
        }
        off += line.len();
    }
    text.len()
}

/// Undo `edit` on `text` (the current config.toml).
pub fn revert(text: &str, edit: &Edit) -> Result<String, EditError> {
    let out = match edit {
        Edit::AppendedBlock { block: added } | Edit::InsertedImports { lines: added } => {
            let at = text.rfind(added.as_str()).ok_or_else(|| {
                EditError::Changed(match edit {
                    Edit::AppendedBlock { .. } => "the BEGIN rund … END rund block".into(),
                    _ => "the inserted `imports` line".into(),
                })
            })?;
            format!("{}{}", &text[..at], &text[at + added.len()..])
        }
        Edit::AddedImport { import } => {
            let mut doc: toml_edit::DocumentMut = text
                .parse()
                .map_err(|e: toml_edit::TomlError| EditError::Invalid(e.to_string()))?;
            let arr = doc
                .get_mut("imports")
                .and_then(|i| i.as_array_mut())
                .ok_or_else(|| EditError::Changed("`imports`".into()))?;
            let idx = arr
                .iter()
                .position(|v| v.as_str() == Some(import))
                .ok_or_else(|| EditError::Changed(format!("imports entry {import:?}")))?;
            arr.remove(idx);
            doc.to_string()
        }
    };
    parse(&out)?;
    Ok(out)
}
