//! SVG to PNG (resvg) and PDF (svg2pdf), with the embedded DejaVu Sans as the sans-serif font
//! so that the output looks the same on every machine.

use std::sync::{Arc, OnceLock};

use ns_core::{Error, Result};
use resvg::{tiny_skia, usvg};

/// The SVG parsed with the embedded fonts.
fn tree(svg: &str) -> Result<usvg::Tree> {
    static FONTS: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    let fonts = FONTS.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        db.load_font_data(dejavu::sans::regular().to_vec());
        db.load_font_data(dejavu::sans::bold().to_vec());
        db.set_sans_serif_family("DejaVu Sans");
        Arc::new(db)
    });
    let options = usvg::Options {
        font_family: "DejaVu Sans".into(),
        fontdb: fonts.clone(),
        ..usvg::Options::default()
    };
    usvg::Tree::from_str(svg, &options)
        .map_err(|e| Error::Computation(format!("reading the drawn SVG: {e}")))
}

/// The SVG as a PNG of `size` pixels.
pub fn png(svg: &str, size: (u32, u32)) -> Result<Vec<u8>> {
    let tree = tree(svg)?;
    let mut pixmap = tiny_skia::Pixmap::new(size.0, size.1)
        .ok_or_else(|| Error::Computation(format!("a {}×{} image", size.0, size.1)))?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap
        .encode_png()
        .map_err(|e| Error::Computation(format!("encoding the PNG: {e}")))
}

/// The SVG as a one-page PDF (vector, fonts embedded).
pub fn pdf(svg: &str) -> Result<Vec<u8>> {
    let tree = tree(svg)?;
    svg2pdf::to_pdf(
        &tree,
        svg2pdf::ConversionOptions::default(),
        svg2pdf::PageOptions::default(),
    )
    .map_err(|e| Error::Computation(format!("writing the PDF: {e}")))
}
