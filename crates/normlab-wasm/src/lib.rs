//! The web lab's widgets for the browser: one entry point, [`api`], that
//! the static lab's page calls where the served lab fetches `/api/<route>`.
//! It runs `normlab_lab::widgets::call`, the code `normlab serve` answers
//! with, so the numbers are the server's. Built by
//! `scripts/build_site_wasm.sh` (wasm32-unknown-unknown, then wasm-bindgen
//! for the JavaScript bindings); single-threaded there.

use wasm_bindgen::prelude::wasm_bindgen;

/// One widget request: `route` (`kinds`, `calc`, `residual-options`,
/// `simulate`) with its raw query string. The answer is JSON text: the
/// server's body for the same request, or `{"error": ...}` where the server
/// answers 400.
#[wasm_bindgen]
pub fn api(route: &str, query: &str) -> String {
    answer(route, query)
}

fn answer(route: &str, query: &str) -> String {
    match normlab_lab::widgets::call(route, query) {
        Ok(v) => v.to_string(),
        Err(e) => serde_json::json!({ "error": e }).to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_are_json_with_errors_as_objects() {
        let ok: serde_json::Value = serde_json::from_str(&super::answer("kinds", "")).unwrap();
        assert!(ok["kinds"].as_array().is_some_and(|k| !k.is_empty()));
        let bad: serde_json::Value = serde_json::from_str(&super::answer("calc", "x=")).unwrap();
        assert!(bad["error"].is_string());
    }
}
