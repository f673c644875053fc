//! Turning results into the markdown table, the JSON file and the SVG plot.

pub mod cpu;
pub mod figures;
pub mod kube;
pub mod memory;
pub mod node;
pub mod pool;
pub mod svg;
pub mod table;

use std::path::Path;

use crate::results::Results;

/// Writes results.json and plot.svg into `dir`; returns their paths.
pub fn write_files(results: &Results, dir: &Path) -> std::io::Result<[std::path::PathBuf; 2]> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join("results.json");
    let text = serde_json::to_string_pretty(results).map_err(std::io::Error::other)?;
    std::fs::write(&json, text + "\n")?;
    let plot = dir.join("plot.svg");
    std::fs::write(&plot, svg::render(results))?;
    Ok([json, plot])
}
