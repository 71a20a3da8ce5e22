//! Compiles the corpus protos (examples/proto) with protox (pure Rust, no protoc) and tonic-prost-build, for
//! the examples and tests of the root package, and writes the routeguide descriptor set, from which
//! tests/routeguide.rs declares its streaming methods.
use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "examples/proto/cinema.proto",
        "examples/proto/helloworld.proto",
        "examples/proto/routeguide.proto",
    ];
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
