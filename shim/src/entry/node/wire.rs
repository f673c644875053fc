//! What `start` tells the node's shim: one JSON line per pod, answered by
//! `ok` or the reason the pod could not be served.

use serde::{Deserialize, Serialize};

/// A request is a few paths; anything longer is not ours.
pub const MAX_LINE: usize = 64 << 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodRequest {
    /// The pod's own ttrpc address (`unix:///run/containerd/s/<hash>`).
    pub socket: String,
    /// containerd's namespace, for the pod's events.
    pub namespace: String,
    /// The runtime options' `ConfigPath`, if containerd sent one.
    pub config_path: Option<String>,
    pub debug: bool,
}

impl PodRequest {
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("a PodRequest serialises");
        s.push('\n');
        s
    }

    pub fn parse(line: &str) -> Result<PodRequest, String> {
        let req: PodRequest =
            serde_json::from_str(line.trim_end()).map_err(|e| format!("bad request: {e}"))?;
        let path = req.socket.trim_start_matches("unix://");
        if !path.starts_with('/') || path.contains("/../") {
            return Err(format!("bad request: socket {:?}", req.socket));
        }
        Ok(req)
    }
}

pub const OK: &str = "ok";

/// The node's answer: `Ok` or the error text it sent.
pub fn reply_result(reply: &str) -> Result<(), String> {
    match reply.trim_end() {
        OK => Ok(()),
        "" => Err("the node's shim closed the connection without answering".into()),
        other => Err(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> PodRequest {
        PodRequest {
            socket: "unix:///run/containerd/s/ab12".into(),
            namespace: "k8s.io".into(),
            config_path: Some("/etc/rund/config.toml".into()),
            debug: false,
        }
    }

    #[test]
    fn a_request_round_trips_as_one_line() {
        let line = req().line();
        assert_eq!(line.matches('\n').count(), 1);
        assert_eq!(PodRequest::parse(&line).unwrap(), req());
    }

    #[test]
    fn junk_and_relative_or_climbing_sockets_are_refused() {
        assert!(PodRequest::parse("{").unwrap_err().contains("bad request"));
        assert!(PodRequest::parse(
            r#"{"socket":"/s","namespace":"n","config_path":null,"debug":false,"x":1}"#
        )
        .is_err());
        for socket in ["unix://s/x", "relative", "/run/../etc/x"] {
            let r = PodRequest {
                socket: socket.into(),
                ..req()
            };
            assert!(PodRequest::parse(&r.line()).is_err(), "{socket}");
        }
    }

    #[test]
    fn replies() {
        assert_eq!(reply_result("ok\n"), Ok(()));
        assert_eq!(reply_result("config: bad\n"), Err("config: bad".into()));
        assert!(reply_result("").unwrap_err().contains("without answering"));
    }
}
