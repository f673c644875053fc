//! The measurements. Each phase alternates the runtimes (A, B, A, B …) so
//! that drift on a noisy machine hits both alike.

pub mod concurrent;
pub mod cri;
pub mod density;
pub mod events;
pub mod features;
pub mod idle;
pub mod kube;
pub mod node;
pub mod polls;
pub mod pool;
pub mod single;
pub mod stop;

use crate::runtime::Runtime;

/// Runtimes in round `i`'s order: reversed every other round, so neither
/// runtime always goes first.
pub fn alternate(rts: &[Runtime], i: usize) -> Vec<&Runtime> {
    let mut v: Vec<&Runtime> = rts.iter().collect();
    if i % 2 == 1 {
        v.reverse();
    }
    v
}

pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimeKind;

    #[test]
    fn rounds_alternate_order() {
        let rts = [
            Runtime::plain(RuntimeKind::Rund),
            Runtime::plain(RuntimeKind::Runc),
        ];
        assert_eq!(alternate(&rts, 0)[0].kind, RuntimeKind::Rund);
        assert_eq!(alternate(&rts, 1)[0].kind, RuntimeKind::Runc);
    }
}
