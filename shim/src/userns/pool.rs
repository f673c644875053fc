//! The node's id pool: `count` ranges of `size` ids from host id `base`.

use crate::config::UsernsConfig;

use super::UsernsError;

/// Ranges smaller than this cannot map the ids images commonly use
/// (nobody = 65534).
pub const RECOMMENDED_SIZE: u32 = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    pub base: u32,
    pub size: u32,
    pub count: u32,
}

impl Pool {
    /// Checks `[userns]`: every range must be non-empty, above host root,
    /// and below 2^32 - 1 (the kernel's invalid id, which no map may cover).
    pub fn from_config(cfg: &UsernsConfig) -> Result<Pool, UsernsError> {
        let bad = |m: String| Err(UsernsError::Config(m));
        if cfg.base == 0 {
            return bad("base is 0: the pool must not include host root (uid 0)".into());
        }
        if cfg.size == 0 {
            return bad("size is 0".into());
        }
        if cfg.count == 0 {
            return bad("count is 0".into());
        }
        let end = cfg.base as u64 + cfg.count as u64 * cfg.size as u64;
        if end > u32::MAX as u64 {
            return bad(format!(
                "base {} + count {} * size {} = {end} passes the largest usable id {}",
                cfg.base,
                cfg.count,
                cfg.size,
                u32::MAX - 1
            ));
        }
        Ok(Pool {
            base: cfg.base,
            size: cfg.size,
            count: cfg.count,
        })
    }

    /// Advice that does not stop rund (tests use small ranges).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.size < RECOMMENDED_SIZE {
            out.push(format!(
                "[userns] size {} is below {RECOMMENDED_SIZE}: images with ids above {} will fail",
                self.size,
                self.size - 1
            ));
        }
        out
    }

    /// First host id of range `index`.
    pub fn slot_base(&self, index: u32) -> u32 {
        self.base + index * self.size
    }

    /// One past the pool's last host id.
    pub fn end(&self) -> u64 {
        self.base as u64 + self.count as u64 * self.size as u64
    }
}

/// Whether `[a, a+alen)` and `[b, b+blen)` share an id.
pub fn overlaps(a: u32, alen: u32, b: u32, blen: u32) -> bool {
    (a as u64) < b as u64 + blen as u64 && (b as u64) < a as u64 + alen as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(base: u32, size: u32, count: u32) -> UsernsConfig {
        UsernsConfig {
            base,
            size,
            count,
            ..Default::default()
        }
    }

    #[test]
    fn default_pool_is_valid() {
        let p = Pool::from_config(&UsernsConfig::default()).unwrap();
        assert!(p.warnings().is_empty());
        assert_eq!(p.slot_base(2), 1_000_000 + 2 * 65_536);
    }

    #[test]
    fn rejects_root_empty_and_overflowing_pools() {
        assert!(Pool::from_config(&cfg(0, 10, 1))
            .unwrap_err()
            .to_string()
            .contains("host root"));
        assert!(Pool::from_config(&cfg(1, 0, 1))
            .unwrap_err()
            .to_string()
            .contains("size is 0"));
        assert!(Pool::from_config(&cfg(1, 1, 0))
            .unwrap_err()
            .to_string()
            .contains("count is 0"));
        let e = Pool::from_config(&cfg(1_000_000, 65_536, 65_536)).unwrap_err();
        assert!(e.to_string().contains("largest usable id"), "{e}");
        // Exactly up to u32::MAX - 1 is fine.
        assert!(Pool::from_config(&cfg(u32::MAX - 10, 10, 1)).is_ok());
        assert!(Pool::from_config(&cfg(u32::MAX - 9, 10, 1)).is_err());
    }

    #[test]
    fn small_sizes_warn_but_pass() {
        let p = Pool::from_config(&cfg(100_000, 1000, 4)).unwrap();
        assert_eq!(p.warnings().len(), 1);
    }

    #[test]
    fn overlap_is_half_open() {
        assert!(overlaps(10, 10, 19, 5));
        assert!(!overlaps(10, 10, 20, 5));
        assert!(!overlaps(20, 5, 10, 10));
        assert!(overlaps(0, u32::MAX, u32::MAX - 1, 1));
    }
}
