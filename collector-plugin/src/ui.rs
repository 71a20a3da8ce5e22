//! The web view (`collector-plugin/web/`), embedded in the binary and served under `/ui/` on the API port:
//! the service graph (cytoscape), the prefix tree, traces, analyses, search reports and diffs, all read from
//! the JSON API.

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const STYLE_CSS: &str = include_str!("../web/style.css");
const CYTOSCAPE_JS: &str = include_str!("../web/vendor/cytoscape.min.js");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Routes `/`, `/ui/`, `/ui/index.html`, `/ui/app.js`, `/ui/style.css`, `/ui/vendor/cytoscape.min.js`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
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
}
