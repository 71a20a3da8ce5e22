//! Compiles the corpus protos (`examples/proto`: cinema, helloworld) with protox (pure Rust, no protoc) and
//! tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["../proto/cinema.proto", "../proto/helloworld.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["../proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
