//! Compiles the test proto (proto/routeguide.proto) for tests/routeguide.rs with protox (pure Rust, no
//! protoc) and tonic-prost-build, and writes its descriptor set, from which the tests declare the streaming
//! methods. The library itself uses none of it.
use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/routeguide.proto");
    let fds = protox::compile(["proto/routeguide.proto"], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("routeguide_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
