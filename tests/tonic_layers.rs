//! The minimal example, `examples/tonic_layers.rs`, run as a user runs it: it exits 0 only when its six RPCs
//! got six distinct indexes, each Echo call's under the World call it was made in; its output lists them. The
//! run is hermetic: the child gets none of the `OTEL_*` variables (with `OTEL_EXPORTER_OTLP_ENDPOINT` the
//! example exports over OTLP to whatever collector it names).

mod built_examples;
use built_examples::example;

#[test]
fn the_minimal_tonic_example_indexes_every_rpc() {
    let mut command = std::process::Command::new(example("tonic_layers"));
    // No exporter, endpoint, sampler or resource from the environment of whoever runs the tests.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    let out = command.output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let indexes: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once("dei.index ").map(|(_, i)| i.trim()))
        .collect();
    assert_eq!(indexes.len(), 6, "{stdout}");
    let nested = indexes.iter().filter(|i| i.matches('.').count() == 2).count();
    assert_eq!(
        nested, 4,
        "four Echo calls, each one element below a World call: {stdout}"
    );
}
