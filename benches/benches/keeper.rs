//! Per-node mode's cost per request: the node shim follows the ttrpc frames
//! of each kept containerd connection (`keeper::inflight::Frames`), tells the
//! keeper of every request it reads (`Msg::Open`) and of every answer it
//! writes (`Msg::Answered`), and the keeper receives both datagrams. Measured
//! here both ends in one thread, over the same kind of socket (a
//! SOCK_SEQPACKET pair), for a State request and its answer.
//!
//! Needs rund-shim: build with `--features keeper-bench`. Without it, this
//! bench prints why and measures nothing.

#[cfg(feature = "keeper-bench")]
mod real {
    use std::hint::black_box;
    use std::os::fd::AsFd;

    use containerd_shim_protos::protobuf::Message;
    use criterion::Criterion;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use rund_shim::entry::node::keeper::inflight::{
        frame, Frames, Seen, TYPE_REQUEST, TYPE_RESPONSE,
    };
    use rund_shim::entry::node::keeper::stash::{self, Msg};

    /// A State request for container `web-0123456789`, as containerd frames it.
    fn state_request(stream: u32) -> Vec<u8> {
        let mut state = containerd_shim_protos::shim::shim::StateRequest::new();
        state.id = "web-0123456789".into();
        let r = containerd_shim_protos::ttrpc::Request {
            service: "containerd.task.v2.Task".into(),
            method: "State".into(),
            payload: state.write_to_bytes().expect("encode"),
            timeout_nano: 2_000_000_000,
            ..Default::default()
        };
        frame(stream, TYPE_REQUEST, &r.write_to_bytes().expect("encode"))
    }

    /// A State answer of the usual size.
    fn state_response(stream: u32) -> Vec<u8> {
        frame(stream, TYPE_RESPONSE, &[7u8; 160])
    }

    pub fn benches(c: &mut Criterion) {
        let (node, keeper) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .expect("socketpair");
        let (req, resp) = (state_request(5), state_response(5));
        let mut g = c.benchmark_group("keeper");
        g.bench_function(
            "one request: frames followed, Open + Answered sent and received",
            |b| {
                let (mut read, mut written) = (Frames::default(), Frames::default());
                b.iter(|| {
                    for seen in read.feed(black_box(&req)) {
                        let Seen::Other { stream } = seen else {
                            panic!("{seen:?}")
                        };
                        stash::send(node.as_fd(), &Msg::Open { key: 9, stream }, &[])
                            .expect("send");
                    }
                    let got = stash::recv(keeper.as_fd()).expect("recv");
                    black_box(got);
                    for seen in written.feed(black_box(&resp)) {
                        let Seen::Response { stream } = seen else {
                            panic!("{seen:?}")
                        };
                        stash::send(node.as_fd(), &Msg::Answered { key: 9, stream }, &[])
                            .expect("send");
                    }
                    black_box(stash::recv(keeper.as_fd()).expect("recv"));
                })
            },
        );
        g.bench_function("one request: frames followed only", |b| {
            let (mut read, mut written) = (Frames::default(), Frames::default());
            b.iter(|| {
                black_box(read.feed(black_box(&req)));
                black_box(written.feed(black_box(&resp)));
            })
        });
        g.finish();
    }
}

fn main() {
    #[cfg(feature = "keeper-bench")]
    {
        let mut c = criterion::Criterion::default().configure_from_args();
        real::benches(&mut c);
        c.final_summary();
    }
    #[cfg(not(feature = "keeper-bench"))]
    eprintln!("keeper bench: build with --features keeper-bench (needs rund-shim)");
}
