//! A minimal protobuf wire reader: the few messages rund reads from
//! containerd and the CRI without their generated code (which would bring
//! in a gRPC stack) are walked field by field.

use containerd_shim_protos::protobuf::CodedInputStream;

#[derive(Debug, thiserror::Error)]
#[error("malformed {what}: {reason}")]
pub struct WireError {
    pub what: &'static str,
    pub reason: String,
}

/// One field's value.
pub enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Calls `f(field number, value)` for every field of `buf`; fixed-width
/// fields are skipped (none of the fields rund reads uses them).
pub fn fields<'a>(
    what: &'static str,
    buf: &'a [u8],
    mut f: impl FnMut(u32, Value<'a>) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let bad = |reason: String| WireError { what, reason };
    let mut input = CodedInputStream::from_bytes(buf);
    while !input.eof().map_err(|e| bad(e.to_string()))? {
        let tag = input.read_raw_varint32().map_err(|e| bad(e.to_string()))?;
        let (number, wire) = (tag >> 3, tag & 7);
        match wire {
            0 => {
                let v = input.read_raw_varint64().map_err(|e| bad(e.to_string()))?;
                f(number, Value::Varint(v))?;
            }
            1 => input.skip_raw_bytes(8).map_err(|e| bad(e.to_string()))?,
            2 => {
                let len = input.read_raw_varint32().map_err(|e| bad(e.to_string()))? as usize;
                let at = input.pos() as usize;
                let end = at
                    .checked_add(len)
                    .filter(|e| *e <= buf.len())
                    .ok_or_else(|| bad(format!("field {number} runs past the end")))?;
                input
                    .skip_raw_bytes(len as u32)
                    .map_err(|e| bad(e.to_string()))?;
                f(number, Value::Bytes(&buf[at..end]))?;
            }
            5 => input.skip_raw_bytes(4).map_err(|e| bad(e.to_string()))?,
            w => return Err(bad(format!("field {number} has wire type {w}"))),
        }
    }
    Ok(())
}

impl<'a> Value<'a> {
    pub fn string(&self, what: &'static str) -> Result<String, WireError> {
        match self {
            Value::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| WireError {
                what,
                reason: "a string is not UTF-8".into(),
            }),
            Value::Varint(_) => Err(WireError {
                what,
                reason: "a string field holds a number".into(),
            }),
        }
    }

    pub fn bytes(&self, what: &'static str) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            Value::Varint(_) => Err(WireError {
                what,
                reason: "a message field holds a number".into(),
            }),
        }
    }

    pub fn number(&self, what: &'static str) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(*v),
            Value::Bytes(_) => Err(WireError {
                what,
                reason: "a number field holds bytes".into(),
            }),
        }
    }
}

/// One `map<string, string>` entry.
pub fn map_entry(what: &'static str, buf: &[u8]) -> Result<(String, String), WireError> {
    let (mut k, mut v) = (String::new(), String::new());
    fields(what, buf, |n, val| {
        match n {
            1 => k = val.string(what)?,
            2 => v = val.string(what)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok((k, v))
}

#[cfg(test)]
pub(crate) mod encode {
    //! Writers for tests: the same wire format, built by hand.
    use containerd_shim_protos::protobuf::CodedOutputStream;

    pub fn msg(f: impl FnOnce(&mut CodedOutputStream<'_>)) -> Vec<u8> {
        let mut v = Vec::new();
        {
            let mut out = CodedOutputStream::vec(&mut v);
            f(&mut out);
            out.flush().unwrap();
        }
        v
    }

    pub fn map(out: &mut CodedOutputStream<'_>, field: u32, k: &str, v: &str) {
        let entry = msg(|o| {
            o.write_string(1, k).unwrap();
            o.write_string(2, v).unwrap();
        });
        out.write_bytes(field, &entry).unwrap();
    }
}
