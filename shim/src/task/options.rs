//! Runtime options containerd passes with Create: CRI's `options` table
//! (`ConfigPath`) and `ctr run --runtime-config-path` both arrive as
//! `runtimeoptions.v1.Options { type_url = 1, config_path = 2, config_body = 3 }`.

use containerd_shim_protos::protobuf::well_known_types::any::Any;

use super::TaskError;
use crate::error::Result;
use crate::protowire;

/// The config path in the options, if any.
pub fn config_path(options: Option<&Any>) -> Result<Option<String>> {
    let Some(any) = options else { return Ok(None) };
    if !any.type_url.ends_with("runtimeoptions.v1.Options") {
        return Ok(None);
    }
    let mut path = None;
    protowire::fields("runtime options", &any.value, |n, v| {
        if n == 2 {
            path = Some(v.string("runtime options")?);
        }
        Ok(())
    })
    .map_err(TaskError::RuntimeOptions)?;
    Ok(path.filter(|p| !p.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(type_url: &str, value: Vec<u8>) -> Any {
        Any {
            type_url: type_url.into(),
            value,
            ..Default::default()
        }
    }

    #[test]
    fn reads_config_path() {
        // field 1 "x", field 2 "/etc/rund/c.toml"
        let mut v = vec![0x0a, 1, b'x', 0x12, 16];
        v.extend_from_slice(b"/etc/rund/c.toml");
        let a = any("runtimeoptions.v1.Options", v);
        assert_eq!(
            config_path(Some(&a)).unwrap().as_deref(),
            Some("/etc/rund/c.toml")
        );
    }

    #[test]
    fn other_types_and_none_are_ignored() {
        assert_eq!(config_path(None).unwrap(), None);
        let a = any("containerd.runc.v1.Options", vec![1, 2, 3]);
        assert_eq!(config_path(Some(&a)).unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error() {
        let a = any("runtimeoptions.v1.Options", vec![0x12, 50, b'a']);
        assert!(config_path(Some(&a)).is_err());
    }
}
