//! The web view (`collector-plugin/web/`), embedded in the binary and served under `/ui/` on the API port:
//! the service graph (cytoscape), the prefix tree, traces, analyses, search reports and diffs, all read from
//! the JSON API. With `--jaeger-ui URL`, `/ui/config.json` gives the web view the links to Jaeger's UI.

use crate::collector::Collector;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Json, Redirect, Response};
use axum::routing::get;
use std::sync::Arc;

const INDEX_HTML: &str = include_str!("../../web/index.html");
const APP_JS: &str = include_str!("../../web/app.js");
const STYLE_CSS: &str = include_str!("../../web/style.css");
const CYTOSCAPE_JS: &str = include_str!("../../web/vendor/cytoscape.min.js");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// A `--jaeger-ui` value that is not an absolute http(s) URL.
#[derive(Debug, thiserror::Error)]
pub enum JaegerUiError {
    /// Not `http://…` or `https://…`.
    #[error("{0:?} is not an http:// or https:// URL (for example http://jaeger:16686)")]
    NotHttp(String),
    /// Holds characters that have no place in a base URL (spaces, quotes, `?`, `#`, control characters).
    #[error("{0:?} is not a base URL: it holds a space, quote, '?', '#' or control character")]
    BadCharacter(String),
}

/// Checks a `--jaeger-ui` base URL (`http://jaeger:16686`, or with a path prefix such as
/// `https://tracing.example.com/jaeger`) and returns it without trailing slashes.
pub fn parse_jaeger_ui(s: &str) -> Result<String, JaegerUiError> {
    let s = s.trim();
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(|| JaegerUiError::NotHttp(s.to_string()))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(JaegerUiError::NotHttp(s.to_string()));
    }
    if rest
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '<' | '>' | '?' | '#' | '\\'))
    {
        return Err(JaegerUiError::BadCharacter(s.to_string()));
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// The web view's links into Jaeger's UI for a base URL: templates with `{trace_id}`, `{service}` and `{tags}`
/// (the URL-encoded JSON object with the `dei.index` tag), which the web view fills in.
pub fn jaeger_links(base: &str) -> serde_json::Value {
    serde_json::json!({
        "jaeger_ui": base,
        "trace": format!("{base}/trace/{{trace_id}}"),
        "search": format!("{base}/search?service={{service}}&tags={{tags}}"),
    })
}

async fn config(State(c): State<Arc<Collector>>) -> Json<serde_json::Value> {
    Json(match &c.config().jaeger_ui {
        Some(base) => jaeger_links(base),
        None => serde_json::json!({ "jaeger_ui": null }),
    })
}

/// Routes `/`, `/ui/`, `/ui/index.html`, `/ui/app.js`, `/ui/style.css`, `/ui/vendor/cytoscape.min.js` and
/// `/ui/config.json` (the Jaeger links, see [`jaeger_links`]; `{"jaeger_ui": null}` without `--jaeger-ui`).
pub fn router() -> Router<Arc<Collector>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route(
            "/ui/index.html",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/ui/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route(
            "/ui/vendor/cytoscape.min.js",
            get(|| async { asset("text/javascript; charset=utf-8", CYTOSCAPE_JS) }),
        )
        .route("/ui/config.json", get(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaeger_ui_urls() {
        assert_eq!(parse_jaeger_ui("http://jaeger:16686/").unwrap(), "http://jaeger:16686");
        assert_eq!(
            parse_jaeger_ui("https://t.example.com/jaeger").unwrap(),
            "https://t.example.com/jaeger"
        );
        for bad in [
            "jaeger:16686",
            "ftp://x",
            "http://",
            "http:///x",
            "http://a b",
            "http://x/?q",
            "http://x/\"y",
        ] {
            assert!(parse_jaeger_ui(bad).is_err(), "{bad}");
        }
        let links = jaeger_links("http://j:16686");
        assert_eq!(links["trace"], "http://j:16686/trace/{trace_id}");
        assert_eq!(links["search"], "http://j:16686/search?service={service}&tags={tags}");
    }
}
