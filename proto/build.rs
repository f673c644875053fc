use ttrpc_codegen::{Codegen, Customize, ProtobufCustomize};

fn main() {
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    for (dir, async_all) in [("sync", false), ("async", true)] {
        let out_dir = format!("{out}/{dir}");
        std::fs::create_dir_all(&out_dir).expect("create codegen dir");
        Codegen::new()
            .out_dir(&out_dir)
            .inputs(["protos/agent.proto"])
            .include("protos")
            .rust_protobuf()
            .customize(Customize {
                async_all,
                ..Default::default()
            })
            .rust_protobuf_customize(ProtobufCustomize::default().gen_mod_rs(false))
            .run()
            .expect("ttrpc codegen for protos/agent.proto");
        strip_inner_attributes(&out_dir);
    }
    println!("cargo:rerun-if-changed=protos/agent.proto");
}

/// `include!` cannot take inner attributes or inner doc comments, which the
/// generator emits; drop them (the including module sets its own allows).
fn strip_inner_attributes(dir: &str) {
    for entry in std::fs::read_dir(dir).expect("read codegen dir") {
        let path = entry.expect("codegen entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read generated file");
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("#![") && !l.trim_start().starts_with("//!"))
            .collect();
        std::fs::write(&path, kept.join("\n")).expect("write generated file");
    }
}
