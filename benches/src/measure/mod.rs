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

use crate::api::Api;
use crate::results::Client;
use crate::runtime::Runtime;

/// How a timed measure drives containerd.
#[derive(Clone, Copy)]
pub enum Driver<'a> {
    /// A `ctr` process per operation.
    Ctr,
    /// containerd's client API over one connection.
    Api(&'a Api),
}

impl Driver<'_> {
    pub fn client(self) -> Client {
        match self {
            Driver::Ctr => Client::Ctr,
            Driver::Api(_) => Client::Api,
        }
    }

    /// Keeps container ids apart between the two.
    pub fn tag(self) -> &'static str {
        match self {
            Driver::Ctr => "",
            Driver::Api(_) => "a",
        }
    }

    /// For progress lines.
    pub fn suffix(self) -> &'static str {
        self.client().suffix()
    }
}

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
