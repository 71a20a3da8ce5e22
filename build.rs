//! Compiles the corpus protos (examples/proto) with protox (pure Rust, no protoc) and tonic-prost-build, for
//! the examples and tests of the root package.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["examples/proto/cinema.proto", "examples/proto/helloworld.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["examples/proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
