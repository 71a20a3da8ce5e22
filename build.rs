//! Compiles the protos of the root package's standalone examples (examples/proto: routeguide for
//! `routeguide_sfit`, helloworld for `tonic_layers`) with protox (pure Rust, no protoc) and tonic-prost-build,
//! and writes the routeguide descriptor set, from which tests/routeguide.rs declares its streaming methods.
//! The corpus's protos are compiled by its own crate (examples/corpus).
use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["examples/proto/helloworld.proto", "examples/proto/routeguide.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["examples/proto"])?;
    let routeguide = prost_types::FileDescriptorSet {
        file: fds
            .file
            .iter()
            .filter(|f| f.package() == "routeguide")
            .cloned()
            .collect(),
    };
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("routeguide_descriptor.bin"), routeguide.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
