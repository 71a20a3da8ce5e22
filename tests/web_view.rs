//! The web view in a real headless browser: Chromium driven through chromedriver (WebDriver, fantoccini)
//! against an embedded dei-collector fed with real spans — the demo's setup: the cinema-10 services with the
//! DEI layers exporting over OTLP/HTTP, searched exhaustively by dei-sfit.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`CHROMIUM` and `CHROMEDRIVER` override the paths). Without
//! them the test is skipped with a message, unless `DEI_REQUIRE_INTEROP=1` (CI), where it fails. Saves
//! web-view.png (the prefix tree with a node's details), web-view-graph.png, web-view-traces.png (the trace
//! list, filtered), web-view-trace.png (a trace's waterfall), web-view-analyses.png, web-view-search.png (an
//! execution's call tree), web-view-search-compare.png (two reports side by side) and web-view-partial.png (a
//! query node over two shards, one of them down).
//!
//! The collector serves a directory of search reports, as the demo serves `target/sfit`: the demo's report,
//! an earlier run's (the same program, fewer executions) and a file that is not a report, which the page
//! must name rather than skip.
//!
//! Screenshots go under the target directory (`web-view/` in cargo's `CARGO_TARGET_TMPDIR`), so that a test run
//! changes nothing tracked; with `DEI_UPDATE_FIGURES=1` they also replace the README's figures in `docs/figures/`.
//!
//! A second test feeds a collector a prefix tree of several thousand nodes (one node with 2000 children, a
//! chain as deep as an index may be) over 121 services, sent as OTLP/HTTP by the SDK's exporter, and checks
//! that the page renders bounded pages of it: the DOM stays small and the page keeps answering. Saves
//! web-view-large-graph.png and web-view-large-tree.png.

use dei_corpus as common;
use dei_corpus::demo_setup;

use common::cinema::Variant;
use dei_collector::server::{self, ServerConfig};
use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use demo_setup::DemoOptions;
use fantoccini::{Client, ClientBuilder, Locator};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value as OtelValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// How long the page may take to show something before the test gives up (not a performance bound).
const PATIENCE: Duration = Duration::from_secs(30);

fn tool(env: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    path.is_file().then_some(path)
}

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_driver(chromedriver: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver { child, port };
    let deadline = Instant::now() + PATIENCE;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

/// Injected into every page before its own scripts (Chrome DevTools' `Page.addScriptToEvaluateOnNewDocument`
/// through chromedriver): the JSON of every `/api/` response is wrapped in proxies that record each property
/// app.js reads that is absent from the object it reads it on (with the endpoint, the JSON path, arrays as
/// `[]`, and the app.js line), and every key the API sent. `window.__deiUnsentReads()` lists the reads of a key
/// that no response of the API carried anywhere: a field app.js expects and the API does not send, such as a
/// renamed one. An optional field that some response carries somewhere is not reported (which also lets a
/// misplaced read of it through); reads by Cytoscape are not app.js's and are not recorded.
const FIELD_READS_JS: &str = r#"(() => {
  const sent = new Set(), reads = new Map();
  const endpoint = u => new URL(String(u && u.url ? u.url : u), location.href).pathname.replace(/\/[0-9a-f]{32}$/, "/{trace_id}");
  function note(ep, path, v) {
    if (v === null || typeof v !== "object") return;
    if (Array.isArray(v)) { for (const x of v) note(ep, path + "[]", x); return; }
    for (const k of Object.keys(v)) { sent.add(k); note(ep, path + "." + k, v[k]); }
  }
  function wrap(ep, path, v) {
    if (v === null || typeof v !== "object") return v;
    const array = Array.isArray(v);
    return new Proxy(v, { get(t, k, r) {
      const x = Reflect.get(t, k, r);
      if (typeof k !== "string") return x;
      if (array) return /^[0-9]+$/.test(k) ? wrap(ep, path + "[]", x) : x;
      if (!(k in t) && k !== "then" && k !== "toJSON") {
        const at = (new Error().stack || "").split("\n").find(l => l.includes("/ui/")) || "";
        if (at.includes("/ui/app.js")) reads.set(ep + " " + path + "." + k, { key: k, at: at.trim() });
      }
      return wrap(ep, path + "." + k, x);
    } });
  }
  const fetch = window.fetch.bind(window);
  window.fetch = async (...args) => {
    const response = await fetch(...args);
    const ep = endpoint(args[0]);
    if (!ep.startsWith("/api/")) return response;
    const json = response.json.bind(response);
    response.json = async () => { const v = await json(); note(ep, "", v); return wrap(ep, "", v); };
    return response;
  };
  window.__deiUnsentReads = () => [...reads].filter(([, r]) => !sent.has(r.key)).map(([where, r]) => where + " (" + r.at + ")");
})();"#;

/// What [`FIELD_READS_JS`] recorded on the page so far (`null` when it was not installed).
async fn unsent_reads(client: &Client) -> Value {
    client
        .execute(
            "return window.__deiUnsentReads ? window.__deiUnsentReads() : null;",
            vec![],
        )
        .await
        .expect("the field-read recorder's findings")
}

/// chromedriver's Chrome DevTools command `Page.addScriptToEvaluateOnNewDocument`.
#[derive(Debug)]
struct AddScriptToEvaluateOnNewDocument(&'static str);

impl fantoccini::wd::WebDriverCompatibleCommand for AddScriptToEvaluateOnNewDocument {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/goog/cdp/execute", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({"cmd": "Page.addScriptToEvaluateOnNewDocument", "params": {"source": self.0}});
        (http::Method::POST, Some(body.to_string()))
    }
}

async fn connect(driver: &Driver, chromium: &Path, profile: &Path) -> Client {
    let args = [
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--no-first-run".into(),
        "--window-size=1400,900".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": chromium.display().to_string(), "args": args }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("WebDriver session");
    client
        .issue_cmd(AddScriptToEvaluateOnNewDocument(FIELD_READS_JS))
        .await
        .expect("install the field-read recorder (chromedriver's goog/cdp/execute)");
    client
}

/// Evaluates `script` (a function body returning a value) until `done` accepts its result.
async fn wait_for(client: &Client, what: &str, script: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = client.execute(script, vec![]).await.unwrap_or(Value::Null);
        if done(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {what}; last value {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The paths of chromium and chromedriver; `None` (after a message) when the test must be skipped.
/// Chromium, chromedriver and a scratch folder for the test (`dir` and the process id, in cargo's
/// `CARGO_TARGET_TMPDIR`); `None` (said loudly) when the browser is missing and not required.
fn browser_tools(test: &str, dir: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let required = std::env::var("DEI_REQUIRE_INTEROP").is_ok_and(|v| v == "1");
    match (
        tool("CHROMIUM", "/usr/bin/chromium"),
        tool("CHROMEDRIVER", "/usr/bin/chromedriver"),
    ) {
        (Some(c), Some(d)) => Some((
            c,
            d,
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{dir}-{}", std::process::id())),
        )),
        _ => {
            let msg = "chromium or chromedriver is missing (apt-get install -y chromium chromium-driver)";
            assert!(!required, "{msg}, and DEI_REQUIRE_INTEROP=1");
            // straight to the process's stderr: the test harness would capture `eprintln!`
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "\n!!!!! SKIPPED {test}: {msg} !!!!!\n");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_view_shows_graph_and_tree_in_chromium() {
    let Some((chromium, chromedriver, tmp)) = browser_tools("web_view", "web_view") else {
        return;
    };

    let reports = tmp.join("sfit");
    let report_path = reports.join(DEMO_REPORT);
    let demo = demo_setup::run(DemoOptions {
        variant: Variant::Cinema10,
        forward: None,
        report_path: report_path.clone(),
        report_dir: Some(reports.clone()),
        progress: false,
    })
    .await
    .expect("demo setup");
    dei_corpus::update_latest(&report_path).expect("latest.json");
    // an earlier run of the program (its first three executions) and a file that is not a report
    let mut earlier: Value = serde_json::from_slice(&std::fs::read(&report_path).expect("the report")).expect("JSON");
    earlier["executions"]
        .as_array_mut()
        .expect("executions")
        .truncate(EARLIER_EXECUTIONS);
    std::fs::write(reports.join(EARLIER_REPORT), earlier.to_string()).expect("write the earlier report");
    std::fs::create_dir_all(reports.join("broken")).expect("mkdir");
    std::fs::write(reports.join(BROKEN_REPORT), r#"{"executions": 3}"#).expect("write a broken report");
    let summary = demo.summary();
    let expected: BTreeSet<String> = ["bookings", "functional-test", "movies", "showtimes", "users"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(summary.services.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert!(
        summary.executions > 1,
        "the search ran more than the fault-free execution"
    );

    let driver = start_driver(&chromedriver);
    let client = connect(&driver, &chromium, &tmp.join("chromium-profile")).await;
    let ui = format!("http://{}/ui/", demo.collector.api_addr);
    client.goto(&ui).await.expect("load /ui/");

    // the service graph: Cytoscape's nodes and the edge table
    let nodes = wait_for(
        &client,
        "the graph's nodes",
        "return window.deiGraph ? window.deiGraph.nodes().map(n => n.id()) : null;",
        |v| strings(v).len() >= expected.len(),
    )
    .await;
    let all: BTreeSet<String> = summary.services.iter().chain(&summary.virtual_nodes).cloned().collect();
    assert_eq!(strings(&nodes), all, "the page's nodes are the collector's");
    assert!(strings(&nodes).is_superset(&expected));
    check_merged_graph(&client, &demo).await;
    check_layout_without_overlaps(&client).await;
    let edges = client
        .execute(
            "return [...document.querySelectorAll('#graph-edges tr')].slice(1)\
             .map(r => r.cells[0].textContent + '->' + r.cells[1].textContent);",
            vec![],
        )
        .await
        .expect("edge table");
    let edges = strings(&edges);
    for e in [
        "functional-test->users",
        "users->bookings",
        "bookings->movies",
        "users->showtimes",
    ] {
        assert!(edges.contains(e), "edge {e} missing from {edges:?}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // let the layout settle for the picture
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-graph.png", &png);

    // the prefix tree: its top level is the functional test's one RPC
    client
        .find(Locator::Css("#tabs button[data-tab=tree]"))
        .await
        .expect("tree tab")
        .click()
        .await
        .expect("click tree tab");
    let top = wait_for(
        &client,
        "the prefix tree",
        "return [...document.querySelectorAll('#tree > ul > li > .row > .sig')].map(s => s.textContent);",
        |v| !strings(v).is_empty(),
    )
    .await;
    assert_eq!(strings(&top), BTreeSet::from(["cinema.Users/GetBookings".to_string()]));

    // click it: it expands, and the detail panel shows its index and the call stack of the test's call
    let top_index = client
        .execute(
            "return document.querySelector('#tree > ul > li').dataset.index;",
            vec![],
        )
        .await
        .expect("top index");
    let top_index = top_index.as_str().expect("data-index").to_string();
    client
        .find(Locator::Css("#tree > ul > li > .row"))
        .await
        .expect("top row")
        .click()
        .await
        .expect("click top row");
    let detail = wait_for(
        &client,
        "the node's details",
        "const i = document.getElementById('detail-index'); return i ? i.textContent : null;",
        |v| v.is_string(),
    )
    .await;
    assert_eq!(detail.as_str(), Some(top_index.as_str()));
    let children = wait_for(
        &client,
        "the children of the top node",
        "return [...document.querySelectorAll('#tree > ul > li > ul > li > .row > .sig')].map(s => s.textContent);",
        |v| !strings(v).is_empty(),
    )
    .await;
    assert!(
        strings(&children).contains("cinema.Bookings/Get"),
        "children: {children}"
    );

    // a nested node: users → bookings, called from users' handler; it expands to bookings → movies
    const BOOKINGS: &str = "//div[@id='tree']/ul/li/ul/li[div/span[@class='sig' and text()='cinema.Bookings/Get']]";
    let bookings = client.find(Locator::XPath(BOOKINGS)).await.expect("bookings node");
    let child_index = bookings
        .attr("data-index")
        .await
        .expect("data-index")
        .expect("data-index");
    bookings
        .find(Locator::Css(".row"))
        .await
        .expect("bookings row")
        .click()
        .await
        .expect("click bookings row");
    let grandchildren = wait_for(
        &client,
        "the children of bookings",
        "return [...document.querySelectorAll('#tree > ul > li > ul > li > ul > li > .row > .sig')]\
         .map(s => s.textContent);",
        |v| !strings(v).is_empty(),
    )
    .await;
    assert_eq!(
        strings(&grandchildren),
        BTreeSet::from(["cinema.Movies/Get".to_string()])
    );
    assert!(
        child_index.starts_with(&format!("{top_index}.")),
        "{child_index} under {top_index}"
    );
    wait_for(
        &client,
        "the child's details",
        "const i = document.getElementById('detail-index'); return i ? i.textContent : null;",
        |v| v.as_str() == Some(child_index.as_str()),
    )
    .await;
    let frames = wait_for(
        &client,
        "stack frames",
        "return [...document.querySelectorAll('#detail-stack li')].map(f => f.textContent);",
        |v| !strings(v).is_empty(),
    )
    .await;
    assert!(
        strings(&frames).iter().any(|f| f.contains("cinema.rs")),
        "no frame in examples/corpus/src/cinema.rs: {frames}"
    );
    let traces = client
        .execute(
            "return [...document.querySelectorAll('#detail-traces a')].length;",
            vec![],
        )
        .await
        .expect("traces");
    assert!(traces.as_u64().unwrap_or(0) > 0, "no retained trace listed");

    check_tree_row_parts(&client, &child_index).await;
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view.png", &png);

    // the search's executions, from the report the collector serves
    client
        .find(Locator::Css("#tabs button[data-tab=search]"))
        .await
        .expect("search tab")
        .click()
        .await
        .expect("click search tab");
    let outcomes = wait_for(
        &client,
        "the search's executions",
        "return [...document.querySelectorAll('#executions tr')].slice(1).map(r => r.cells[1].textContent);",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    let outcomes: Vec<&str> = outcomes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        outcomes.len(),
        summary.executions,
        "one row per execution: {outcomes:?}"
    );
    let expected_failures = summary.failures;
    assert_eq!(
        outcomes.iter().filter(|o| o.starts_with("fail")).count(),
        expected_failures,
        "{outcomes:?}"
    );
    assert!(
        outcomes.iter().all(|o| *o == "pass" || o.starts_with("fail: ")),
        "{outcomes:?}"
    );

    // every view's navigation: the graph's legend, layers and details, the tree's keyboard and search box,
    // the search report in words; then URLs that reopen a selection, and API errors shown on the page
    check_graph_details(&client).await;
    let index = check_tree_keyboard_and_search(&client).await;
    check_search_report(&client).await;
    check_report_picker(&client, &ui).await;
    check_trace_filters(&client, &ui, &demo, &child_index).await;

    // app.js reads no field that the API does not send, on any tab (it read each endpoint's JSON above)
    click(&client, "#tabs button[data-tab=traces]").await;
    wait_for(
        &client,
        "the trace list",
        "return document.querySelectorAll('#trace-list tr').length;",
        |v| v.as_u64().is_some_and(|n| n > 1),
    )
    .await;
    click(&client, "#trace-list tr:nth-child(2) a").await;
    wait_for(
        &client,
        "a trace's calls",
        "return document.querySelectorAll('#trace-tree-root li').length;",
        |v| v.as_u64().is_some_and(|n| n > 0),
    )
    .await;
    click(&client, "#tabs button[data-tab=analyses]").await;
    wait_for(
        &client,
        "the analyses",
        "return document.querySelectorAll('#analyses h2').length;",
        |v| v.as_u64().is_some_and(|n| n > 0),
    )
    .await;
    // in sentences and tables, not JSON; a finding's node opens in the tree
    let analyses = client
        .execute(
            "return [document.getElementById('analyses').textContent,
                     [...document.querySelectorAll('#analyses a.node-link')].map(a => a.getAttribute('href'))];",
            vec![],
        )
        .await
        .expect("the analyses' text");
    let text = analyses[0].as_str().unwrap_or_default();
    assert!(
        !text.contains("{\"") && !text.contains("\":"),
        "JSON in the analyses: {text}"
    );
    assert!(text.contains("traces analyzed"), "{text}");
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-analyses.png", &png);
    let href = analyses[1]
        .as_array()
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no finding names a tree node: {text}"));
    let finding = href.trim_start_matches("#tree/").to_string();
    click(&client, &format!("#analyses a.node-link[href=\"{href}\"]")).await;
    wait_for(
        &client,
        "the finding's node",
        "return document.getElementById('detail-index')?.textContent;",
        |v| v == finding.as_str(),
    )
    .await;
    click(&client, "#tabs button[data-tab=analyses]").await;
    click(&client, "#tabs button[data-tab=diff]").await;
    wait_for(
        &client,
        "the diff",
        "return document.querySelectorAll('#diff-result h2').length;",
        |v| v.as_u64().is_some_and(|n| n > 0),
    )
    .await;
    let unsent = unsent_reads(&client).await;
    assert!(
        unsent.as_array().is_some_and(|reads| reads.is_empty()),
        "app.js reads fields that the API does not send (null: the recorder was not installed): {unsent:#}"
    );
    check_deep_links_and_errors(&client, &ui, &index).await;
    check_live_updates(&client, &ui, &format!("http://{}/v1/traces", demo.collector.http_addr)).await;
    client.close().await.expect("close the session");
    drop(driver);
    demo.collector.shutdown().await;
}

/// The graph: a legend for both kinds of node and for the failure colours, callers above their callees
/// (a layered layout from the nodes nobody calls), and an edge's numbers, latency percentiles included,
/// on a click.
async fn check_graph_details(client: &Client) {
    click(client, "#tabs button[data-tab=graph]").await;
    let legend = wait_for(
        client,
        "the graph's legend",
        "return document.getElementById('graph-legend').textContent;",
        |v| v.as_str().is_some_and(|t| t.contains("virtual")),
    )
    .await;
    assert!(legend.as_str().unwrap_or("").contains("failed / requests"), "{legend}");
    let levels = client
        .execute(
            "const cy = window.deiGraph, roots = cy.nodes().roots(), rest = cy.nodes().difference(roots);
             return [roots.length, rest.length, Math.max(...roots.map(n => n.position('y'))),
                     Math.min(...rest.map(n => n.position('y')))];",
            vec![],
        )
        .await
        .expect("node levels");
    let l: Vec<f64> = levels
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect();
    assert!(
        l.len() == 4 && l[0] >= 1.0 && l[1] >= 1.0,
        "roots and callees: {levels}"
    );
    assert!(l[2] < l[3], "every root sits above every callee: {levels}");
    client
        .execute(
            "const e = window.deiGraph.edges().filter(e => e.data('failed') > 0)[0] || window.deiGraph.edges()[0];
             e.emit('tap');",
            vec![],
        )
        .await
        .expect("tap an edge");
    let detail = wait_for(
        client,
        "an edge's details",
        "return document.getElementById('graph-detail').textContent;",
        |v| v.as_str().is_some_and(|t| t.contains("requests")),
    )
    .await;
    let detail = detail.as_str().unwrap_or("");
    assert!(
        detail.contains("→") && detail.contains("p50") && detail.contains("p99"),
        "{detail}"
    );
    // the tree nodes on that edge, each opening its node
    let on_edge = wait_for(
        client,
        "the tree nodes on the edge",
        "return [...document.querySelectorAll('#graph-detail .edge-nodes a')].map(a => a.getAttribute('href'));",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    let href = on_edge[0].as_str().unwrap_or_default().to_string();
    click(client, &format!("#graph-detail .edge-nodes a[href=\"{href}\"]")).await;
    wait_for(
        client,
        "the edge's tree node",
        "return [document.getElementById('detail-index')?.textContent, location.hash];",
        |v| v[1] == href.as_str() && v[0] == href.trim_start_matches("#tree/"),
    )
    .await;
}

/// The tree with the keyboard (ArrowRight opens a node and sets `aria-expanded`, ArrowDown moves to its
/// first child), then a pasted `dei.index` opens its node. Returns that index.
async fn check_tree_keyboard_and_search(client: &Client) -> String {
    click(client, "#tabs button[data-tab=tree]").await;
    let first = wait_for(
        client,
        "a tree item with children",
        "const li = document.querySelector('#tree [role=treeitem][aria-expanded]');
         return li ? [li.dataset.index, li.getAttribute('aria-expanded')] : null;",
        |v| v.is_array(),
    )
    .await;
    let open = first[1] == "true";
    let first = first[0].as_str().unwrap_or_default().to_string();
    let state =
        "return document.querySelector(`#tree [data-index=\"${arguments[0]}\"]`).getAttribute('aria-expanded');";
    client
        .execute(
            "document.querySelector(`#tree [data-index=\"${arguments[0]}\"]`).focus();",
            vec![json!(first)],
        )
        .await
        .expect("focus the item");
    if open {
        // opened by the clicks above: ArrowLeft closes it first
        let focused = client.active_element().await.expect("the focused item");
        focused.send_keys("\u{e012}").await.expect("ArrowLeft"); // WebDriver's ArrowLeft
        let closed = client.execute(state, vec![json!(first)]).await.expect("its state");
        assert_eq!(closed, "false", "ArrowLeft closes an open item");
    }
    let focused = client.active_element().await.expect("the focused item");
    focused.send_keys("\u{e014}").await.expect("ArrowRight"); // WebDriver's ArrowRight
    wait_for(
        client,
        "the item opened by ArrowRight",
        &format!(
            "const li = document.querySelector('#tree [data-index=\"{first}\"]');
             return [li.getAttribute('aria-expanded'), li.querySelectorAll('[role=treeitem]').length];"
        ),
        |v| v[0] == "true" && v[1].as_u64().is_some_and(|n| n > 0),
    )
    .await;
    client
        .active_element()
        .await
        .expect("the focused item")
        .send_keys("\u{e015}") // ArrowDown
        .await
        .expect("ArrowDown");
    let child = client
        .execute("return document.activeElement.dataset.index;", vec![])
        .await
        .expect("the focused child");
    let child = child.as_str().unwrap_or_default().to_string();
    assert!(
        child.starts_with(&format!("{first}.")),
        "ArrowDown moves from {first} to its first child, not to {child:?}"
    );

    // a pasted index opens its node, and the URL names it
    let input = client
        .find(Locator::Css("#index-search input"))
        .await
        .expect("the index box");
    input
        .send_keys(&format!(" {child} \u{e007}"))
        .await
        .expect("paste and submit (Enter)");
    let shown = wait_for(
        client,
        "the pasted index's node",
        "return [document.getElementById('detail-index')?.textContent, location.hash];",
        |v| v[0] == child.as_str(),
    )
    .await;
    assert_eq!(shown[1], format!("#tree/{child}"), "{shown}");
    child
}

/// The search report in words: planned faults as `signature → fault` with the fault spelled out, and the call
/// tree of an execution whose plan was carried out, with its injected faults marked.
async fn check_search_report(client: &Client) {
    click(client, "#tabs button[data-tab=search]").await;
    let plans = wait_for(
        client,
        "the executions' plans",
        "return [...document.querySelectorAll('#executions tr')].slice(1).map(r => r.cells[2].textContent);",
        |v| v.as_array().is_some_and(|a| a.len() > 1),
    )
    .await;
    let plans = strings(&plans);
    assert!(plans.contains("none (the fault-free run)"), "{plans:?}");
    let spelled = ["gRPC ", "HTTP ", "connection error", "latency "];
    assert!(
        plans
            .iter()
            .filter(|p| !p.starts_with("none"))
            .all(|p| p.contains(" → ") && spelled.iter().any(|w| p.contains(w))),
        "every plan names its targets and spells out its faults: {plans:?}"
    );
    client
        .execute(
            "[...document.querySelectorAll('#executions tr')].slice(1)
               .find(r => r.cells[3].textContent === 'every planned fault injected').click();",
            vec![],
        )
        .await
        .expect("click an execution whose plan was carried out");
    let tree = wait_for(
        client,
        "an execution's call tree with its injected faults",
        "return [...document.querySelectorAll('#execution-detail .badge.fault')].map(b => b.textContent);",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    assert!(strings(&tree).iter().all(|b| b.starts_with("injected: ")), "{tree}");
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-search.png", &png);
    // the execution links to its trace, which opens
    let trace = client
        .execute(
            "const a = document.querySelector('#execution-detail .exec-traces a'); return a ? a.getAttribute('href') : null;",
            vec![],
        )
        .await
        .expect("an execution's trace link");
    let trace = trace
        .as_str()
        .unwrap_or_else(|| panic!("the execution lists no trace: {trace}"))
        .to_string();
    click(client, "#execution-detail .exec-traces a").await;
    wait_for(
        client,
        "the execution's trace",
        "return document.getElementById('trace-tree').textContent;",
        |v| {
            v.as_str()
                .is_some_and(|t| t.contains(trace.trim_start_matches("#traces/")))
        },
    )
    .await;
    click(client, "#tabs button[data-tab=search]").await;
    click(client, "#executions tr:nth-child(3)").await;
    // an RPC of the execution opens its node in the tree
    let href = client
        .execute(
            "return document.querySelector('#execution-detail .exec-tree a.el').getAttribute('href');",
            vec![],
        )
        .await
        .expect("an RPC's link");
    let href = href.as_str().unwrap_or_default().to_string();
    click(client, "#execution-detail .exec-tree a.el").await;
    wait_for(
        client,
        "the RPC's tree node",
        "return [document.getElementById('detail-index')?.textContent, location.hash];",
        |v| v[1] == href.as_str() && v[0] == href.trim_start_matches("#tree/"),
    )
    .await;
}

/// The demo's report, under the served directory (a run's own file, as `dei_corpus::run_report_path` names it).
const DEMO_REPORT: &str = "demo/2030-01-02T03-04-05.678Z.json";
/// An earlier run's report of the same program.
const EARLIER_REPORT: &str = "demo/2030-01-01T00-00-00.000Z.json";
/// Executions in the earlier report.
const EARLIER_EXECUTIONS: usize = 3;
/// A file that is not a report.
const BROKEN_REPORT: &str = "broken/2030-01-01T00-00-00.000Z.json";

/// The service a cinema RPC's signature targets: `cinema.Bookings/Get` → `bookings` (as the demo names its
/// services).
fn service_of(signature: &str) -> String {
    let rpc_service = signature.split('/').next().unwrap_or_default();
    rpc_service.rsplit('.').next().unwrap_or_default().to_lowercase()
}

/// The graph merges the calls that failed before reaching a service (the search's injected connection faults,
/// whose client spans meet no server span) into the edges to that service: no `cinema.*` virtual node is
/// left, in the collector's graph or on the page, and the failed calls count on the real edges.
async fn check_merged_graph(client: &Client, demo: &demo_setup::Demo) {
    let graph = demo.collector.collector.graph();
    let virtual_nodes: Vec<&str> = graph.nodes.iter().filter(|n| n.is_virtual).map(|n| &*n.id).collect();
    assert!(
        virtual_nodes.iter().all(|v| !v.starts_with("cinema.")),
        "virtual nodes left: {virtual_nodes:?}"
    );
    let mut injected: BTreeMap<String, u64> = BTreeMap::new();
    for e in &demo.report.executions {
        for f in &e.effective {
            *injected.entry(service_of(&f.signature)).or_default() += 1;
        }
    }
    assert!(!injected.is_empty(), "the search injected faults");
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for e in &graph.edges {
        if e.merged_requests > 0 {
            *merged.entry(e.server.to_string()).or_default() += e.merged_requests;
            assert_eq!(
                e.merged_failed, e.merged_requests,
                "a connection fault fails its call: {e:?}"
            );
            assert!(e.failed >= e.merged_failed && e.requests > e.merged_requests, "{e:?}");
        }
    }
    assert_eq!(
        merged, injected,
        "each injected connection fault counts on the edge to the service it targeted"
    );
    for node in graph.nodes.iter().filter(|n| injected.contains_key(&*n.id)) {
        assert!(
            node.serves.iter().any(|s| service_of(s) == *node.id),
            "{} serves its rpc.service: {node:?}",
            node.id
        );
    }
    // the page: no cinema.* node, and the edges' requests and failures with the merged calls
    let page = client
        .execute(
            "return [window.deiGraph.nodes().filter(n => n.data('virtual') === 1).map(n => n.id()),
                     [...document.querySelectorAll('#graph-edges tr')].slice(1)
                       .map(r => [r.cells[0].textContent, r.cells[1].textContent, r.cells[2].textContent, r.cells[3].textContent])];",
            vec![],
        )
        .await
        .expect("the page's graph");
    assert!(
        strings(&page[0]).iter().all(|v| !v.starts_with("cinema.")),
        "virtual nodes on the page: {page}"
    );
    for e in graph.edges.iter().filter(|e| e.merged_requests > 0) {
        let row = page[1]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r[0] == *e.client && r[1] == *e.server)
            .unwrap_or_else(|| panic!("no row for {} → {}: {page}", e.client, e.server));
        assert_eq!(row[2], e.requests.to_string(), "{row}");
        assert_eq!(
            row[3],
            format!("{} ({} before reaching it)", e.failed, e.merged_requests),
            "{row}"
        );
    }
    // a service's details name the rpc.service it serves
    client
        .execute("window.deiGraph.getElementById('bookings').emit('tap');", vec![])
        .await
        .expect("tap bookings");
    wait_for(
        client,
        "bookings' details",
        "return document.querySelector('#graph-detail p.hint')?.textContent;",
        |v| v == "service, serving cinema.Bookings",
    )
    .await;
}

/// A tree row reads as its parts: `cinema.Bookings/Get #1 · payload 3f2a… · stack examples/…/cinema.rs:201`,
/// the full payload digest and frame on hover, and in the node's details to copy.
async fn check_tree_row_parts(client: &Client, index: &str) {
    let parts = client
        .execute(
            "const row = document.querySelector(`#tree li[data-index=\"${arguments[0]}\"] > .row`);
             const hash = row.querySelector('.part .hash'), frame = row.querySelector('.part .frame');
             return [row.textContent, hash && hash.title, frame && frame.textContent, frame && frame.title,
                     document.getElementById('detail-digests')?.textContent,
                     document.querySelector('#detail-stack li')?.textContent];",
            vec![json!(index)],
        )
        .await
        .expect("the row's parts");
    let text = parts[0].as_str().unwrap_or_default();
    assert!(
        text.contains("cinema.Bookings/Get #1 · payload ") && text.contains(" · stack examples/"),
        "{parts}"
    );
    let payload = parts[1]
        .as_str()
        .and_then(|t| t.strip_prefix("payload digest "))
        .unwrap_or_else(|| panic!("no payload digest on hover: {parts}"));
    assert!(
        payload.len() == 64 && payload.bytes().all(|b| b.is_ascii_hexdigit()),
        "{parts}"
    );
    assert!(text.contains(&format!("payload {}…", &payload[..4])), "{parts}");
    let short = parts[2].as_str().unwrap_or_default();
    assert!(
        short.starts_with("examples/…/cinema.rs:")
            && short.rsplit(':').next().is_some_and(|l| l.parse::<u32>().is_ok()),
        "{parts}"
    );
    let top = parts[5].as_str().unwrap_or_default();
    assert!(
        parts[3]
            .as_str()
            .is_some_and(|t| t.starts_with(top) && t.contains("stack digest ")),
        "the hover holds the whole top frame and the stack digest: {parts}"
    );
    assert!(
        parts[4].as_str().is_some_and(|d| d.contains(payload)),
        "the details hold the full digest: {parts}"
    );
}

/// The trace list: its columns, a filter from the filter bar (the URL then names it), a filter from a URL (a
/// `dei.index` prefix), each checked against what the report and the API say.
async fn check_trace_filters(client: &Client, ui: &str, demo: &demo_setup::Demo, index: &str) {
    click(client, "#tabs button[data-tab=traces]").await;
    let header = wait_for(
        client,
        "the trace list's columns",
        "return [...document.querySelectorAll('#traces-table tr:first-child th')].map(h => h.textContent);",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    for column in ["started", "duration", "root operation", "service", "status", "faults"] {
        assert!(strings(&header).contains(column), "{column}: {header}");
    }
    let first = client
        .execute(
            "const r = document.querySelector('#traces-table tr:nth-child(2)');
             return [...r.cells].map(c => c.textContent);",
            vec![],
        )
        .await
        .expect("a row");
    assert!(first[2].as_str().is_some_and(|d| d.ends_with(" ms")), "{first}");
    assert_eq!(first[3], "cinema.Users/GetBookings", "{first}");
    assert_eq!(first[4], "functional-test", "{first}");

    // status: fault injected, from the filter bar: the traces of the executions that injected a fault
    let faulty: BTreeSet<String> = demo
        .report
        .executions
        .iter()
        .filter(|e| !e.effective.is_empty())
        .flat_map(|e| e.traces.iter().cloned())
        .collect();
    assert!(!faulty.is_empty());
    client
        .execute(
            "const f = document.getElementById('trace-filters'); f.elements.status.value = 'fault';",
            vec![],
        )
        .await
        .expect("choose a status");
    click(client, "#trace-filters button[type=submit]").await;
    let shown = wait_for(
        client,
        "the traces with a fault",
        &format!(
            "return location.hash === '#traces?status=fault' && document.getElementById('traces-count')?.textContent.startsWith('{} of')
               ? [...document.querySelectorAll('#traces-table tr[data-trace]')].map(r => r.dataset.trace) : null;",
            faulty.len()
        ),
        |v| v.is_array(),
    )
    .await;
    assert_eq!(
        strings(&shown),
        faulty,
        "the fault filter lists exactly the faulty executions' traces"
    );
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-traces.png", &png);

    // a dei.index prefix and a duration range, from a URL: the traces that made that RPC (or one under it)
    let made: Value = client
        .execute(
            "return fetch('/api/v1/tree/node/traces?index=' + encodeURIComponent(arguments[0])).then(r => r.json());",
            vec![json!(index)],
        )
        .await
        .expect("the node's traces from the API");
    let made = strings(&made["traces"]);
    assert!(!made.is_empty());
    client.goto("about:blank").await.expect("leave the page");
    client
        .goto(&format!(
            "{ui}#traces?index={index}&min_duration_ms=0&max_duration_ms=600000"
        ))
        .await
        .expect("a filtered list's URL");
    let shown = wait_for(
        client,
        "the traces under the index",
        "return document.getElementById('traces-count')
           ? [document.getElementById('trace-filters').elements.index.value,
              [...document.querySelectorAll('#traces-table tr[data-trace]')].map(r => r.dataset.trace)] : null;",
        |v| v.is_array(),
    )
    .await;
    assert_eq!(shown[0], index, "the filter bar shows the URL's filters");
    assert_eq!(strings(&shown[1]), made);
    // a bad filter is the API's 400, shown on the page
    click(client, "#trace-filters button[type=reset]").await;
    client
        .execute(
            "const f = document.getElementById('trace-filters'); f.elements.index.value = '1.not-an-index';",
            vec![],
        )
        .await
        .expect("a bad index");
    click(client, "#trace-filters button[type=submit]").await;
    let error = wait_for(
        client,
        "the refused filter",
        "const e = document.getElementById('error'); return e.hidden ? null : e.textContent;",
        |v| v.is_string(),
    )
    .await;
    assert!(
        error
            .as_str()
            .is_some_and(|e| e.contains("400") && e.contains("invalid index")),
        "{error}"
    );
    client
        .execute("document.querySelector('#error button').click();", vec![])
        .await
        .expect("dismiss");
}

/// The report picker: the served directory's reports, newest first, by program and time; the file that is
/// not a report named on the page; two reports side by side, the choice in the URL.
async fn check_report_picker(client: &Client, ui: &str) {
    click(client, "#tabs button[data-tab=search]").await;
    let options = wait_for(
        client,
        "the report picker",
        "return [...document.querySelectorAll('#report-a option')].map(o => [o.value, o.textContent]);",
        |v| v.as_array().is_some_and(|a| a.len() >= 2),
    )
    .await;
    let ids: Vec<&str> = options
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o[0].as_str())
        .collect();
    assert_eq!(ids, [DEMO_REPORT, EARLIER_REPORT], "newest first: {options}");
    assert!(
        options[0][1]
            .as_str()
            .is_some_and(|t| t.starts_with("demo · 2030-01-02 03:04:05.678 UTC") && t.ends_with("(latest)")),
        "{options}"
    );
    assert!(
        options[1][1]
            .as_str()
            .is_some_and(|t| t.contains(&format!("{EARLIER_EXECUTIONS} executions"))),
        "{options}"
    );
    let problems = client
        .execute(
            "const p = document.getElementById('report-problems'); return p.hidden ? null : p.textContent;",
            vec![],
        )
        .await
        .expect("the problems");
    assert!(
        problems
            .as_str()
            .is_some_and(|p| p.starts_with("1 report file could not be read") && p.contains(BROKEN_REPORT)),
        "{problems}"
    );
    client
        .execute(
            "const b = document.getElementById('report-b'); b.value = arguments[0]; b.dispatchEvent(new Event('change'));",
            vec![json!(EARLIER_REPORT)],
        )
        .await
        .expect("compare with the earlier report");
    let panes = "return location.hash.includes('compare=')
        ? [...document.querySelectorAll('.report-pane')].map(p => [p.dataset.report, p.querySelector('h2').textContent,
            p.querySelectorAll('.executions tr').length - 1]) : null;";
    let shown = wait_for(client, "two reports side by side", panes, |v| {
        v.as_array().is_some_and(|a| a.len() == 2)
    })
    .await;
    assert_eq!(shown[0][0], DEMO_REPORT, "{shown}");
    assert_eq!(shown[1][0], EARLIER_REPORT, "{shown}");
    assert_eq!(shown[1][1], "demo · 2030-01-01 00:00:00.000 UTC", "{shown}");
    assert_eq!(shown[1][2], EARLIER_EXECUTIONS as u64, "{shown}");
    assert!(
        shown[0][2].as_u64().is_some_and(|n| n > EARLIER_EXECUTIONS as u64),
        "{shown}"
    );
    click(client, "#executions-b tr:nth-child(2)").await;
    wait_for(
        client,
        "an execution of the earlier report",
        "return document.querySelectorAll('#execution-detail-b .exec-tree li').length;",
        |v| v.as_u64().is_some_and(|n| n > 0),
    )
    .await;
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-search-compare.png", &png);
    // the URL reopens both
    let url = client.current_url().await.expect("the URL").to_string();
    assert!(url.contains("#search?report=") && url.contains("&compare="), "{url}");
    client.goto("about:blank").await.expect("leave the page");
    client.goto(&url).await.expect("the comparison's URL");
    let again = wait_for(client, "the same two reports", panes, |v| {
        v.as_array().is_some_and(|a| a.len() == 2)
    })
    .await;
    assert_eq!(again, shown);
    client.goto(&format!("{ui}#search")).await.expect("back to one report");
}

/// A URL reopens what it names, in a page loaded afresh: a tree node, a trace; an API error is shown on the
/// page, as is a pasted value that is not an index.
async fn check_deep_links_and_errors(client: &Client, ui: &str, index: &str) {
    client.goto("about:blank").await.expect("leave the page");
    client
        .goto(&format!("{ui}#tree/{index}"))
        .await
        .expect("deep link to a node");
    wait_for(
        client,
        "the linked node's details",
        "return [document.getElementById('detail-index')?.textContent,
                 document.querySelector('#tabs button.active')?.dataset.tab];",
        |v| v[0] == index && v[1] == "tree",
    )
    .await;
    let trace = wait_for(
        client,
        "a trace link in the node's details",
        "const a = document.querySelector('#detail-traces a'); return a ? a.textContent : null;",
        |v| v.is_string(),
    )
    .await;
    let trace = trace.as_str().unwrap_or_default().to_string();
    client.goto("about:blank").await.expect("leave the page");
    client
        .goto(&format!("{ui}#traces/{trace}"))
        .await
        .expect("deep link to a trace");
    wait_for(
        client,
        "the linked trace",
        "return document.getElementById('trace-tree').textContent;",
        |v| v.as_str().is_some_and(|t| t.contains(&trace)),
    )
    .await;
    // its waterfall: a row per RPC, every bar inside the trace's time span, the earliest at its start
    let waterfall = wait_for(
        client,
        "the trace's waterfall",
        "const rows = document.querySelectorAll('#waterfall .wf-row:not(.wf-axis)').length;
         const rpcs = Number(document.querySelector('#trace-tree p').textContent.match(/([0-9]+) RPCs/)[1]);
         const bars = [...document.querySelectorAll('#waterfall .bar')]
           .map(b => [parseFloat(b.style.left), parseFloat(b.style.width)]);
         return [rows, rpcs, bars];",
        |v| v[0].as_u64().is_some_and(|n| n > 0),
    )
    .await;
    assert_eq!(waterfall[0], waterfall[1], "one row per RPC: {waterfall}");
    let bars: Vec<(f64, f64)> = waterfall[2]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| Some((b[0].as_f64()?, b[1].as_f64()?)))
        .collect();
    assert!(!bars.is_empty(), "{waterfall}");
    assert!(
        bars.iter().all(|(l, w)| *l >= 0.0 && *w > 0.0 && l + w <= 100.5),
        "{waterfall}"
    );
    assert!(
        bars.iter().any(|(l, _)| *l == 0.0),
        "the earliest span starts the timeline: {waterfall}"
    );
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-trace.png", &png);

    let missing = "0123456789abcdef0123456789abcdef";
    client
        .goto(&format!("{ui}#traces/{missing}"))
        .await
        .expect("a trace the collector does not have");
    let error = wait_for(
        client,
        "the API's error on the page",
        "const e = document.getElementById('error'); return e.hidden ? null : e.textContent;",
        |v| v.is_string(),
    )
    .await;
    assert!(error.as_str().unwrap_or("").contains("404"), "{error}");
    client
        .execute("document.querySelector('#error button').click();", vec![])
        .await
        .expect("dismiss");
    click(client, "#tabs button[data-tab=tree]").await;
    let input = client
        .find(Locator::Css("#index-search input"))
        .await
        .expect("the index box");
    input.send_keys("not an index\u{e007}").await.expect("submit (Enter)");
    let error = wait_for(
        client,
        "the refusal of a value that is not an index",
        "const e = document.getElementById('error'); return e.hidden ? null : e.textContent;",
        |v| v.is_string(),
    )
    .await;
    assert!(error.as_str().unwrap_or("").contains("not a dei.index"), "{error}");
}

/// The open view follows the data without a reload and keeps its selection: spans that arrive while the
/// graph shows a selected node add their services to it, and spans that arrive while the tree shows an open,
/// selected node add a node beside it, which stays open and selected.
async fn check_live_updates(client: &Client, ui: &str, otlp_http: &str) {
    client.goto("about:blank").await.expect("leave the page");
    client.goto(&format!("{ui}#graph")).await.expect("the graph");
    wait_for(
        client,
        "the graph",
        "return window.deiGraph ? window.deiGraph.getElementById('users').length : 0;",
        |v| v == 1,
    )
    .await;
    client
        .execute(
            "window.deiSameDocument = true; window.deiGraph.getElementById('users').select().emit('tap');",
            vec![],
        )
        .await
        .expect("select a node");
    let mut late = LargeLoad::default();
    late.add(0, None, service(1), "late.Arrival/Get", "first".into());
    export(otlp_http.to_string(), late.spans())
        .await
        .expect("export while the graph is open");
    let graph = wait_for(
        client,
        "the late services in the open graph, the selection kept",
        &format!(
            "const cy = window.deiGraph;
             return [window.deiSameDocument === true, cy.getElementById('{}').length,
                     cy.$(':selected').map(e => e.id()), document.querySelector('#graph-detail h2')?.textContent];",
            service(1)
        ),
        |v| v[1] == 1,
    )
    .await;
    assert_eq!(
        graph[0], true,
        "updated in place, not by loading the page again: {graph}"
    );
    assert_eq!(graph[2], json!(["users"]), "{graph}");
    assert_eq!(graph[3], "users", "{graph}");

    click(client, "#tabs button[data-tab=tree]").await;
    let open = wait_for(
        client,
        "a tree item with children",
        "const li = document.querySelector('#tree [role=treeitem][aria-expanded]'); return li ? li.dataset.index : null;",
        |v| v.is_string(),
    )
    .await;
    let open = open.as_str().unwrap_or_default().to_string();
    click(client, &format!("#tree [data-index=\"{open}\"] > .row")).await;
    let mut later = LargeLoad::default();
    later.add(1, None, service(2), "late.Arrival/Get", "second".into());
    let new = later.rpcs[0].index.encode();
    export(otlp_http.to_string(), later.spans())
        .await
        .expect("export while the tree is open");
    let tree = wait_for(
        client,
        "the late node in the open tree, the open node still open and selected",
        &format!(
            "const at = i => document.querySelector(`#tree [data-index=\"${{i}}\"]`);
             return [window.deiSameDocument === true, !!at('{new}'), at('{open}')?.getAttribute('aria-expanded'),
                     !!at('{open}')?.querySelector(':scope > .row.selected'),
                     document.getElementById('detail-index')?.textContent];"
        ),
        |v| v[1] == true && v[2] == "true" && v[3] == true,
    )
    .await;
    assert_eq!(tree[0], true, "{tree}");
    assert_eq!(tree[2], "true", "the open node stays open: {tree}");
    assert_eq!(tree[3], true, "the selected node stays selected: {tree}");
    assert_eq!(tree[4], open.as_str(), "{tree}");
}

/// Writes a screenshot under the target directory, and over the tracked figure in `docs/figures/` only when
/// `DEI_UPDATE_FIGURES=1`.
fn save(relative: &str, png: &[u8]) {
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let name = Path::new(relative).file_name().expect("a file name");
    let mut paths = vec![Path::new(env!("CARGO_TARGET_TMPDIR")).join("web-view").join(name)];
    if std::env::var("DEI_UPDATE_FIGURES").is_ok_and(|v| v == "1") {
        paths.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(relative));
    }
    for path in paths {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("figures dir");
        }
        std::fs::write(&path, png).expect("write the screenshot");
        eprintln!("screenshot: {}", path.display());
    }
}

// ---- thousands of tree nodes and a graph of many services ----------------------------------------------

/// Children of the wide node.
const WIDE_CHILDREN: usize = 2_000;
/// Services the load spreads over (plus [`LOADGEN`], which makes the top-level calls).
const SERVICES: usize = 120;
/// Top-level orders; each checks [`SHOP_ITEMS`] items, each item gets [`SHOP_QUOTES`] quotes.
const SHOPS: usize = 4;
const SHOP_ITEMS: usize = 40;
const SHOP_QUOTES: usize = 20;
/// The service that makes the top-level calls.
const LOADGEN: &str = "loadgen";
/// Rows the web view renders per page of a long child list (`PAGE` in collector-plugin/web/app.js).
const UI_PAGE: usize = 200;

fn service(i: usize) -> String {
    format!("svc-{:03}", i % SERVICES)
}

/// One generated RPC: a client span in the caller's service and a server span in the callee's.
struct Rpc {
    trace: u8,
    index: Index,
    parent: Option<usize>,
    client: String,
    server: String,
    signature: &'static str,
    payload: String,
}

/// RPCs forming a prefix tree of several thousand nodes over [`SERVICES`] services: one node with
/// [`WIDE_CHILDREN`] children, a chain as deep as the collector accepts, and a few orders three levels deep.
#[derive(Default)]
struct LargeLoad {
    rpcs: Vec<Rpc>,
    /// The top-level RPCs, one trace each.
    roots: Vec<usize>,
    /// The node with [`WIDE_CHILDREN`] children.
    wide: usize,
    /// The chain, top first.
    chain: Vec<usize>,
}

impl LargeLoad {
    fn generate() -> Self {
        let mut load = LargeLoad::default();
        let mut trace = 0;
        load.wide = load.add(trace, None, service(0), "fanout.Catalog/List", "all".into());
        for k in 0..WIDE_CHILDREN {
            let server = service(1 + k % (SERVICES - 1));
            load.add(
                trace,
                Some(load.wide),
                server,
                "fanout.Catalog/Item",
                format!("item-{k}"),
            );
        }
        trace += 1;
        // the deepest index the collector decodes
        let depth = dei_propagator::Limits::default().max_depth;
        let mut parent = None;
        for level in 1..=depth {
            let hop = load.add(
                trace,
                parent,
                service(level * 13),
                "chain.Relay/Forward",
                format!("hop-{level}"),
            );
            load.chain.push(hop);
            parent = Some(hop);
        }
        for order in 0..SHOPS {
            trace += 1;
            let root = load.add(
                trace,
                None,
                service(order * 30),
                "shop.Orders/Place",
                format!("order-{order}"),
            );
            for item in 0..SHOP_ITEMS {
                let stock = order * SHOP_ITEMS + item + 1;
                let check = load.add(
                    trace,
                    Some(root),
                    service(stock),
                    "shop.Stock/Check",
                    format!("{order}/{item}"),
                );
                for quote in 0..SHOP_QUOTES {
                    let payload = format!("{order}/{item}/{quote}");
                    load.add(
                        trace,
                        Some(check),
                        service(stock + 1 + quote % 4),
                        "shop.Pricing/Quote",
                        payload,
                    );
                }
            }
        }
        load
    }

    /// Adds an RPC from the parent's server (or [`LOADGEN`]) to `server`, indexed like the DEI layers do.
    fn add(
        &mut self,
        trace: u8,
        parent: Option<usize>,
        server: String,
        signature: &'static str,
        payload: String,
    ) -> usize {
        let (base, client) = match parent {
            Some(p) => (self.rpcs[p].index.clone(), self.rpcs[p].server.clone()),
            None => (Index::root(), LOADGEN.to_string()),
        };
        let invocation = InvocationSignature::new(
            Signature::from_name(signature),
            PayloadDigest::of(payload.as_bytes()),
            STACK_DIGEST,
        );
        let index = base.child(Element::new(invocation.element_digest(&Instantiation::dei()), 1));
        self.rpcs.push(Rpc {
            trace,
            index,
            parent,
            client,
            server,
            signature,
            payload,
        });
        if parent.is_none() {
            self.roots.push(self.rpcs.len() - 1);
        }
        self.rpcs.len() - 1
    }

    fn trace_id(trace: u8) -> TraceId {
        TraceId::from_bytes([0xDE, 0x1B, 0x16, 0x0E, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, trace])
    }

    /// The service graph's edges, `client->server`.
    fn edges(&self) -> BTreeSet<String> {
        self.rpcs
            .iter()
            .map(|r| format!("{}->{}", r.client, r.server))
            .collect()
    }

    /// Every span, by the `service.name` that sends it.
    fn spans(&self) -> BTreeMap<String, Vec<SpanData>> {
        let start = SystemTime::now();
        let scope = InstrumentationScope::builder("dei-web-view-test").build();
        let client_id = |i: usize| SpanId::from_bytes((2 * i as u64 + 1).to_be_bytes());
        let server_id = |i: usize| SpanId::from_bytes((2 * i as u64 + 2).to_be_bytes());
        let mut out: BTreeMap<String, Vec<SpanData>> = BTreeMap::new();
        for (i, rpc) in self.rpcs.iter().enumerate() {
            let attributes = vec![
                KeyValue::new("dei.index", rpc.index.encode()),
                KeyValue::new("dei.signature", rpc.signature),
                KeyValue::new("dei.payload.digest", PayloadDigest::of(rpc.payload.as_bytes()).to_hex()),
                KeyValue::new("dei.stack.digest", STACK_DIGEST.to_hex()),
                KeyValue::new("dei.count", 1_i64),
                KeyValue::new("dei.depth", rpc.index.depth() as i64),
                KeyValue::new("dei.instantiation", "dei"),
                KeyValue::new(
                    "dei.stack",
                    OtelValue::Array(Array::String(vec![
                        StringValue::from(frame(rpc.signature)),
                        StringValue::from("web_view::large_load::serve (tests/web_view.rs)"),
                    ])),
                ),
                KeyValue::new("rpc.system", "grpc"),
            ];
            let at = start + Duration::from_micros(10 * i as u64);
            let span = |id: SpanId, parent: SpanId, kind: SpanKind, from: Duration, to: Duration| SpanData {
                span_context: SpanContext::new(
                    Self::trace_id(rpc.trace),
                    id,
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                ),
                parent_span_id: parent,
                parent_span_is_remote: false,
                span_kind: kind,
                name: rpc.signature.into(),
                start_time: at + from,
                end_time: at + to,
                attributes: attributes.clone(),
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status: Status::Ok,
                instrumentation_scope: scope.clone(),
            };
            let caller = rpc.parent.map_or(SpanId::INVALID, server_id);
            let client = span(
                client_id(i),
                caller,
                SpanKind::Client,
                Duration::ZERO,
                Duration::from_micros(200),
            );
            let server = span(
                server_id(i),
                client_id(i),
                SpanKind::Server,
                Duration::from_micros(20),
                Duration::from_micros(180),
            );
            out.entry(rpc.client.clone()).or_default().push(client);
            out.entry(rpc.server.clone()).or_default().push(server);
        }
        out
    }
}

const STACK_DIGEST: StackDigest = StackDigest([7; 32]);

/// The (readable) stack frame recorded for an RPC: `fanout.Catalog/Item` → `web_view::fanout::catalog_item`.
fn frame(signature: &str) -> String {
    let (service, method) = signature.split_once('/').unwrap_or((signature, ""));
    let method: String = method
        .chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let sep = (c.is_uppercase() && i > 0).then_some('_');
            sep.into_iter().chain(c.to_lowercase())
        })
        .collect();
    format!(
        "web_view::{}_{method} (tests/web_view.rs)",
        service.to_lowercase().replace('.', "::")
    )
}

/// Sends the spans over OTLP/HTTP (the SDK's exporter, one `service.name` per request), off the runtime:
/// the exporter's HTTP client blocks.
async fn export(endpoint: String, spans: BTreeMap<String, Vec<SpanData>>) -> Result<usize, String> {
    tokio::task::spawn_blocking(move || {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| e.to_string())?;
        let mut sent = 0;
        for (service, spans) in spans {
            exporter.set_resource(
                &Resource::builder_empty()
                    .with_attributes([KeyValue::new("service.name", service.clone())])
                    .build(),
            );
            for batch in spans.chunks(1_000) {
                futures::executor::block_on(exporter.export(batch.to_vec()))
                    .map_err(|e| format!("exporting {service}'s spans: {e}"))?;
                sent += batch.len();
            }
        }
        Ok(sent)
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The number of elements `css` matches.
async fn count(client: &Client, css: &str) -> usize {
    let v = client
        .execute(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .await
        .expect("count elements");
    v.as_u64().expect("a count") as usize
}

/// Clicks the first element `css` matches, as a user would (WebDriver scrolls it into view).
async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// A script round trip: the page's main thread is free to run it and the document has loaded.
async fn assert_responsive(client: &Client, after: &str) {
    let state = client
        .execute("return document.readyState;", vec![])
        .await
        .unwrap_or_else(|e| panic!("no script round trip after {after}: {e}"));
    assert_eq!(state.as_str(), Some("complete"), "after {after}");
}

fn row_of(index: &str) -> String {
    format!("li[data-index=\"{index}\"] > .row")
}

async fn wait_for_detail(client: &Client, index: &str) {
    wait_for(
        client,
        &format!("the details of {index}"),
        "const i = document.getElementById('detail-index'); \
         return i && document.getElementById('detail-traces') ? i.textContent : null;",
        |v| v.as_str() == Some(index),
    )
    .await;
}

/// The details panel's stack frames and trace ids.
async fn detail_frames_and_traces(client: &Client) -> (BTreeSet<String>, BTreeSet<String>) {
    let frames = client
        .execute(
            "return [...document.querySelectorAll('#detail-stack li')].map(f => f.textContent);",
            vec![],
        )
        .await
        .expect("frames");
    let traces = client
        .execute(
            "return [...document.querySelectorAll('#detail-traces a')].map(a => a.textContent);",
            vec![],
        )
        .await
        .expect("traces");
    (strings(&frames), strings(&traces))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_view_stays_bounded_with_thousands_of_nodes_in_chromium() {
    let Some((chromium, chromedriver, tmp)) = browser_tools("web_view (large)", "web_view_large") else {
        return;
    };

    // a collector whose client and server halves wait long enough to pair however slowly the spans arrive
    let mut config = ServerConfig::ephemeral();
    config.state.graph.store_ttl = Duration::from_secs(600);
    let collector = server::start(config).await.expect("start the collector");
    let load = LargeLoad::generate();
    let depth = load.chain.len();
    let spans = load.spans();
    let sent = export(format!("http://{}/v1/traces", collector.http_addr), spans)
        .await
        .expect("export over OTLP/HTTP");
    assert_eq!(sent, 2 * load.rpcs.len());
    {
        let a = collector.collector.stats();
        assert_eq!(a.tree_nodes, load.rpcs.len() + 1, "one node per RPC, and the root");
        assert_eq!(a.graph_waiting_spans, 0, "every client span met its server span");
        assert_eq!(a.graph_edges, load.edges().len());
    }
    let nodes = load.rpcs.len();
    let services: BTreeSet<String> = (0..SERVICES).map(service).chain([LOADGEN.to_string()]).collect();
    let edges = load.edges();
    assert!(
        nodes >= 5_000 && edges.len() >= 300,
        "{nodes} nodes, {} edges",
        edges.len()
    );

    let driver = start_driver(&chromedriver);
    let client = connect(&driver, &chromium, &tmp.join("chromium-profile")).await;
    client
        .goto(&format!("http://{}/ui/", collector.api_addr))
        .await
        .expect("load /ui/");

    // the graph: every service and edge in Cytoscape, laid out at distinct positions, with a layout that scales
    let shown = wait_for(
        &client,
        "the graph's nodes",
        "return window.deiGraph ? window.deiGraph.nodes().map(n => n.id()) : null;",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    assert_eq!(strings(&shown), services);
    let shown_edges = client
        .execute(
            "return window.deiGraph.edges().map(e => e.source().id() + '->' + e.target().id());",
            vec![],
        )
        .await
        .expect("graph edges");
    assert_eq!(strings(&shown_edges), edges);
    let positions = client
        .execute(
            "return window.deiGraph.nodes().map(n => { const p = n.position(); \
             return Number.isFinite(p.x) && Number.isFinite(p.y) ? Math.round(p.x) + ',' + Math.round(p.y) : null; });",
            vec![],
        )
        .await
        .expect("node positions");
    assert_eq!(
        strings(&positions).len(),
        services.len(),
        "one position per node: {positions}"
    );
    let layout = client
        .execute("return document.getElementById('graph-canvas').dataset.layout;", vec![])
        .await
        .expect("layout");
    assert_eq!(
        layout.as_str(),
        Some("concentric"),
        "a layout linear in the graph's size"
    );
    // the edge table: one page of rows (header, page, "show more")
    assert_eq!(count(&client, "#graph-edges tr:not(.more)").await, 1 + UI_PAGE);
    assert_eq!(count(&client, "#graph-edges tr.more").await, 1);
    assert_responsive(&client, "the graph").await;
    tokio::time::sleep(Duration::from_millis(500)).await; // let the canvas paint for the picture
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-large-graph.png", &png);

    // the tree: its roots
    click(&client, "#tabs button[data-tab=tree]").await;
    let tops = wait_for(
        &client,
        "the prefix tree's roots",
        "return [...document.querySelectorAll('#tree > ul > li[role=treeitem]')].map(li => li.dataset.index);",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    let roots: BTreeSet<String> = load.roots.iter().map(|&r| load.rpcs[r].index.encode()).collect();
    assert_eq!(strings(&tops), roots);
    let stats = wait_for(
        &client,
        "the statistics",
        "return document.getElementById('stats').textContent;",
        |v| v.as_str().is_some_and(|s| !s.is_empty()),
    )
    .await;
    assert!(
        stats
            .as_str()
            .is_some_and(|s| s.starts_with(&format!("{} tree nodes", nodes + 1))),
        "{stats}"
    );

    // the wide node: its details, and one page of its children, then one more
    let wide = load.rpcs[load.wide].index.encode();
    let wide_trace = LargeLoad::trace_id(load.rpcs[load.wide].trace).to_string();
    let wide_badges = client
        .execute(
            "return document.querySelector(arguments[0]).textContent;",
            vec![json!(row_of(&wide))],
        )
        .await
        .expect("wide row");
    assert!(
        wide_badges
            .as_str()
            .is_some_and(|t| t.contains(&format!("{WIDE_CHILDREN} children"))),
        "{wide_badges}"
    );
    click(&client, &row_of(&wide)).await;
    wait_for_detail(&client, &wide).await;
    let (frames, traces) = detail_frames_and_traces(&client).await;
    assert!(frames.contains(&frame("fanout.Catalog/List")), "{frames:?}");
    assert_eq!(traces, BTreeSet::from([wide_trace.clone()]));
    let children = format!("li[data-index=\"{wide}\"] > ul > li[role=treeitem]");
    let more = format!("li[data-index=\"{wide}\"] > ul > li.more");
    wait_for(
        &client,
        "the wide node's first page",
        &format!("return document.querySelectorAll('{children}').length;"),
        |v| v.as_u64().is_some_and(|n| n > 0),
    )
    .await;
    assert_responsive(&client, "expanding 2000 children").await;
    assert_eq!(
        count(&client, &children).await,
        UI_PAGE,
        "one page of the {WIDE_CHILDREN} children"
    );
    let rest = WIDE_CHILDREN - UI_PAGE;
    let more_text = client
        .execute(
            "return document.querySelector(arguments[0]).textContent;",
            vec![json!(more)],
        )
        .await
        .expect("show-more row");
    assert_eq!(
        more_text.as_str(),
        Some(format!("show {UI_PAGE} more of {rest}").as_str())
    );
    click(&client, &more).await;
    wait_for(
        &client,
        "the wide node's second page",
        &format!("return document.querySelectorAll('{children}').length;"),
        |v| v.as_u64() == Some(2 * UI_PAGE as u64),
    )
    .await;
    let shown_children = client
        .execute(
            "return [...document.querySelectorAll(arguments[0])].map(li => li.dataset.index);",
            vec![json!(children)],
        )
        .await
        .expect("children");
    let shown_children = strings(&shown_children);
    assert_eq!(shown_children.len(), 2 * UI_PAGE, "distinct children");
    let all_children: BTreeSet<String> = load
        .rpcs
        .iter()
        .filter(|r| r.parent == Some(load.wide))
        .map(|r| r.index.encode())
        .collect();
    assert!(shown_children.is_subset(&all_children));

    // the chain, expanded level by level down to the deepest node the collector accepts
    for pair in load.chain.windows(2) {
        let (here, next) = (load.rpcs[pair[0]].index.encode(), load.rpcs[pair[1]].index.encode());
        click(&client, &row_of(&here)).await;
        wait_for(
            &client,
            "the next level of the chain",
            &format!("return document.querySelector('{}') !== null;", row_of(&next)),
            |v| v.as_bool() == Some(true),
        )
        .await;
    }
    let deepest = load.rpcs[*load.chain.last().expect("a chain")].index.encode();
    click(&client, &row_of(&deepest)).await;
    wait_for_detail(&client, &deepest).await;
    let depth_line = client
        .execute(
            "return [...document.querySelectorAll('#node-detail p')].map(p => p.textContent).find(t => t.startsWith('depth')) || '';",
            vec![],
        )
        .await
        .expect("depth line");
    assert!(
        depth_line
            .as_str()
            .is_some_and(|t| t.starts_with(&format!("depth {depth} "))),
        "{depth_line}"
    );
    let (frames, traces) = detail_frames_and_traces(&client).await;
    assert!(frames.contains(&frame("chain.Relay/Forward")), "{frames:?}");
    let chain_trace = LargeLoad::trace_id(load.rpcs[load.chain[0]].trace).to_string();
    assert_eq!(traces, BTreeSet::from([chain_trace]));
    assert_responsive(&client, "expanding the chain").await;
    // the DOM holds the roots, two pages of the wide node and the chain: not the tree's thousands of nodes
    assert_eq!(
        count(&client, "#tree li[role=treeitem]").await,
        roots.len() + 2 * UI_PAGE + (depth - 1)
    );
    let png = client.screenshot().await.expect("screenshot");
    save("docs/figures/web-view-large-tree.png", &png);

    // the wide node's trace: 2001 RPCs, one page of them rendered
    click(&client, &row_of(&wide)).await;
    wait_for_detail(&client, &wide).await;
    click(&client, "#detail-traces a").await;
    let heading = wait_for(
        &client,
        "the wide trace",
        "const t = document.querySelector('#trace-tree p'); return t ? t.textContent : null;",
        |v| v.is_string(),
    )
    .await;
    assert_eq!(
        heading.as_str(),
        Some(format!("trace {wide_trace} · {} RPCs", WIDE_CHILDREN + 1).as_str())
    );
    assert_eq!(count(&client, "#trace-tree-root li:not(.more)").await, 1 + UI_PAGE);
    assert_eq!(count(&client, "#trace-tree-root li.more").await, 1);
    assert_responsive(&client, "the wide trace").await;

    client.close().await.expect("close the session");
    drop(driver);
    collector.shutdown().await;
}

/// On a query node over shards (`dei-collector query`), the header counts the shards that answered, and a
/// shard that does not answer makes the view partial, said above every tab, until it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_nodes_view_says_when_it_is_partial_in_chromium() {
    let Some((chromium, chromedriver, tmp)) = browser_tools("web_view (query node)", "web_view_query") else {
        return;
    };
    let shard_a = server::start(ServerConfig::ephemeral()).await.expect("a shard");
    let shard_b = server::start(ServerConfig::ephemeral()).await.expect("a shard");
    let (a_url, b_url) = (
        format!("http://{}", shard_a.api_addr),
        format!("http://{}", shard_b.api_addr),
    );
    let mut config = server::QueryConfig::new(vec![a_url, b_url.clone()], "127.0.0.1:0".parse().expect("an address"));
    config.interval = Duration::from_millis(200);
    let query = server::start_query(config).await.expect("a query node");

    let driver = start_driver(&chromedriver);
    let client = connect(&driver, &chromium, &tmp.join("chromium-profile")).await;
    client
        .goto(&format!("http://{}/ui/", query.api_addr))
        .await
        .expect("load /ui/");
    let header = "return [document.getElementById('stats').textContent, \
                  document.getElementById('partial').hidden, document.getElementById('partial').textContent];";
    wait_for(&client, "both shards answering", header, |v| {
        v[0].as_str().is_some_and(|t| t.contains("2 of 2 shards")) && v[1] == true
    })
    .await;

    shard_b.shutdown().await;
    let shown = wait_for(&client, "the partial view", header, |v| {
        v[0].as_str().is_some_and(|t| t.contains("1 of 2 shards")) && v[1] == false
    })
    .await;
    let note = shown[2].as_str().unwrap_or_default();
    assert!(
        note.starts_with("Partial view:") && note.contains(&b_url),
        "the note names the shard that did not answer: {note:?}"
    );
    // every tab still opens: a missing shard is no error page
    for tab in ["tree", "traces", "analyses", "graph"] {
        click(&client, &format!("#tabs button[data-tab='{tab}']")).await;
        assert_responsive(&client, tab).await;
    }
    let banner = client
        .execute("return document.getElementById('error').hidden;", vec![])
        .await
        .expect("the error banner");
    assert_eq!(banner, Value::Bool(true), "no API error while a shard is down");
    let png = client.screenshot().await.expect("a screenshot");
    save("docs/figures/web-view-partial.png", &png);
    let unsent = unsent_reads(&client).await;
    assert_eq!(
        unsent,
        json!([]),
        "app.js reads fields that the API does not send: {unsent:#}"
    );
    client.close().await.expect("close the session");
    query.shutdown().await;
    shard_a.shutdown().await;
}

/// A trace the collector did not record whole (past its cap of RPCs per trace, or with malformed `dei.*` data)
/// is marked incomplete in the trace list and above its tree, saying what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incomplete_trace_is_marked_in_the_list_and_above_its_tree_in_chromium() {
    let Some((chromium, chromedriver, tmp)) = browser_tools("web_view (incomplete trace)", "web_view_incomplete")
    else {
        return;
    };
    let mut config = ServerConfig::ephemeral();
    config.state.traces.max_occurrences = 2;
    let collector = server::start(config).await.expect("a collector");
    // four RPCs at distinct indexes (two past the cap), and one whose dei.count is not an int
    let trace = "0102030405060708090a0b0c0d0e0f42";
    let span = |n: u64, last: char, count: Value| {
        json!({"traceId": trace, "spanId": format!("{n:016x}"), "name": "a.B/C", "kind": 3,
               "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
               "attributes": [{"key": "dei.index", "value": {"stringValue": format!("1.AAAAAAAAAA{last}1")}},
                              {"key": "dei.signature", "value": {"stringValue": "a.B/C"}},
                              {"key": "dei.count", "value": count},
                              {"key": "dei.depth", "value": {"intValue": "1"}}]})
    };
    let mut spans: Vec<Value> = "AEIM"
        .chars()
        .zip(1u64..)
        .map(|(c, n)| span(n, c, json!({"intValue": "1"})))
        .collect();
    spans.push(span(9, 'Q', json!({"stringValue": "x"})));
    let body = json!({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                                         "scopeSpans": [{"spans": spans}]}]});
    let answer = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", collector.http_addr))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("export");
    assert!(answer.status().is_success(), "{}", answer.status());

    let driver = start_driver(&chromedriver);
    let client = connect(&driver, &chromium, &tmp.join("chromium-profile")).await;
    let ui = format!("http://{}/ui/", collector.api_addr);
    client.goto(&format!("{ui}#traces/{trace}")).await.expect("the trace");
    let note = wait_for(
        &client,
        "the note above the trace's tree",
        "return document.getElementById('trace-incomplete')?.textContent ?? null;",
        |v| v.is_string(),
    )
    .await;
    let note = note.as_str().unwrap_or_default();
    assert!(
        note.starts_with("incomplete")
            && note.contains("2 spans past the collector's cap")
            && note.contains("1 span with malformed dei.* data"),
        "{note:?}"
    );
    client.goto("about:blank").await.expect("leave the page");
    client.goto(&format!("{ui}#traces")).await.expect("the trace list");
    let row = wait_for(
        &client,
        "the trace's row in the list",
        &format!("return document.querySelector('tr[data-trace=\"{trace}\"]')?.textContent ?? null;"),
        |v| v.is_string(),
    )
    .await;
    assert!(row.as_str().is_some_and(|r| r.ends_with("2 incomplete")), "{row}");
    let unsent = unsent_reads(&client).await;
    // (`peers` is a query node's, read as optional on every node: the other tests see it sent)
    let unsent: Vec<&Value> = (unsent.as_array().into_iter().flatten())
        .filter(|r| !r.as_str().is_some_and(|r| r.starts_with("/api/v1/stats .peers ")))
        .collect();
    assert!(
        unsent.is_empty(),
        "app.js reads fields that the API does not send: {unsent:#?}"
    );
    client.close().await.expect("close the session");
    collector.shutdown().await;
}

/// The layered layout leaves no two nodes (with their labels) overlapping, and no edge's label over a node:
/// Cytoscape's own bounding boxes, in model coordinates.
async fn check_layout_without_overlaps(client: &Client) {
    let found = client
        .execute(
            "const cy = window.deiGraph;
             const box = b => [b.x1, b.y1, b.x2, b.y2];
             const nodes = cy.nodes().map(n => [n.id(), box(n.boundingBox({ includeLabels: true, includeOverlays: false }))]);
             const labels = cy.edges().filter(e => e.style('label'))
               .map(e => [e.source().id() + '->' + e.target().id(),
                          box(e.boundingBox({ includeNodes: false, includeEdges: false, includeLabels: true,
                                              includeMainLabels: true, includeSourceLabels: false,
                                              includeTargetLabels: false, includeOverlays: false }))]);
             const hit = (a, b) => a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
             const bad = [];
             for (let i = 0; i < nodes.length; i++)
               for (let j = i + 1; j < nodes.length; j++)
                 if (hit(nodes[i][1], nodes[j][1])) bad.push(nodes[i][0] + ' overlaps ' + nodes[j][0]);
             for (const [n, a] of nodes)
               for (const [e, b] of labels)
                 if (b[2] > b[0] && hit(a, b)) bad.push('the label of ' + e + ' over ' + n);
             return { nodes: nodes.length, labels: labels.filter(l => l[1][2] > l[1][0]).length, bad };",
            vec![],
        )
        .await
        .expect("the layout's bounding boxes");
    assert!(
        found["nodes"].as_u64().unwrap_or(0) > 2 && found["labels"].as_u64().unwrap_or(0) > 2,
        "nodes and labelled edges to check: {found}"
    );
    assert_eq!(found["bad"], json!([]), "the graph's layout overlaps: {found}");
}
