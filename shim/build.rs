//! Release link arguments (`linkorder/link_args.rs`).

include!("../linkorder/link_args.rs");

fn main() {
    link_release("containerd-shim-rund-v2");
    link_release("rund");
}
