//! Compiles the test protos with protox (pure Rust, no protoc) and tonic-prost-build, and writes their
//! descriptor set so that tests can register streaming methods from it.
use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/deitest.proto");
    let fds = protox::compile(["proto/deitest.proto"], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("deitest_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
