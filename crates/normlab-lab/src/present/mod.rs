//! Presentation shared by the experiments and `normlab report`: tables
//! and number formatting ([`table`]), figures ([`plot`]) and the
//! heat map of a grid of seed groups ([`grid`]). Nothing here computes a
//! result; it lays out what was measured.

mod axis;
pub mod grid;
mod heat;
pub mod plot;
pub mod prose;
pub mod table;

pub use plot::{Figure, Heatmap, LineChart, Panel, Series};
pub use table::{f, opt, opt_step, Table};
