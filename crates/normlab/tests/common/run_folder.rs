//! Run-folder files as normlab wrote them before checksums: a safetensors
//! file of a run folder rewritten with its metadata record `key` stripped
//! of the checksum (the tensors untouched).

use safetensors::tensor::{serialize, TensorView};
use std::path::Path;

/// Rewrite `path` without the checksum in its metadata record `key`.
pub fn without_checksum(path: &Path, key: &str) {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut record: serde_json::Value =
        serde_json::from_str(&meta.metadata().as_ref().unwrap()[key]).unwrap();
    assert!(
        record["checksum"].as_str().unwrap().starts_with("crc32:"),
        "{record}"
    );
    record.as_object_mut().unwrap().remove("checksum");
    let views: Vec<(String, TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let t = TensorView::new(v.dtype(), v.shape().to_vec(), v.data()).unwrap();
            (n, t)
        })
        .collect();
    let mut m = std::collections::HashMap::new();
    m.insert(key.to_string(), record.to_string());
    std::fs::write(path, serialize(views, Some(m)).unwrap()).unwrap();
}
