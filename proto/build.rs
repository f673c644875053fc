use ttrpc_codegen::{Codegen, Customize, ProtobufCustomize};

fn main() {
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    Codegen::new()
        .out_dir(&out)
        .inputs(["protos/agent.proto"])
        .include("protos")
        .rust_protobuf()
        .customize(Customize {
            async_all: true,
            ..Default::default()
        })
        .rust_protobuf_customize(ProtobufCustomize::default().gen_mod_rs(false))
        .run()
        .expect("ttrpc codegen for protos/agent.proto");
    strip_inner_attributes(&out);
    println!("cargo:rerun-if-changed=protos/agent.proto");
}

/// `include!` cannot take the inner attributes and inner doc comments the
/// generators emit, and neither generator has an option to leave them out:
/// drop them (the including module sets its own allows).
fn strip_inner_attributes(dir: &str) {
    for name in ["agent.rs", "agent_ttrpc.rs"] {
        let path = std::path::Path::new(dir).join(name);
        let text = std::fs::read_to_string(&path).expect("read generated file");
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("#![") && !l.trim_start().starts_with("//!"))
            .collect();
        std::fs::write(&path, kept.join("\n")).expect("write generated file");
    }
}
