//! Reference grammars, written independently of the parsers they check.

/// `[A-Za-z]([A-Za-z0-9._-]*[A-Za-z0-9])?` for vendor, with '.' not allowed
/// in class (the CDI spec's documented grammar; the CDI crate's own checker
/// is looser there, so rund's stricter class rule is the one asserted).
fn qualifier(s: &str, extra: &[u8]) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphabetic()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
}

/// `[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?`.
fn device_name(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(c))
}

/// Whether `s` is a fully-qualified CDI device name `vendor/class=name`.
pub fn is_cdi_name(s: &str) -> bool {
    let Some((kind, name)) = s.split_once('=') else {
        return false;
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    qualifier(vendor, b"._-") && qualifier(class, b"_-") && device_name(name)
}

#[cfg(test)]
mod tests {
    use super::is_cdi_name;

    #[test]
    fn grammar() {
        for good in [
            "nvidia.com/gpu=0",
            "a/b=c",
            "rund.io/rdma=mlx5_0",
            "x/y=GPU-1:2",
        ] {
            assert!(is_cdi_name(good), "{good}");
        }
        for bad in [
            "0vendor/gpu=0",
            "nvidia.com/9pu=0",
            "nvidia.com/g.pu=0",
            "nvidia.com/gpu=-0",
            "nvidia.com/gpu=a=b",
            "nvidia.com/gpu",
            "v/c=ä",
        ] {
            assert!(!is_cdi_name(bad), "{bad}");
        }
    }
}
