//! Figures from nextstat's result JSON — the Brazil band and CLs curve, impacts, pulls,
//! correlations, profile-likelihood scans, stacked yields and toy distributions — as SVG, PNG
//! or PDF. [`spec`] reads what a figure shows from a result (the numbers drawn; shared with the
//! Python package, which draws the same content with matplotlib), [`render`] draws it with
//! plotters, [`export`] converts it. Nothing here prints or fits.

pub mod export;
pub mod render;
pub mod spec;
pub mod style;

use ns_core::{Error, Result};

pub use spec::{Figure, KINDS, Options, figure};

/// An output format, from a file name's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
    Pdf,
}

impl Format {
    pub fn of_path(path: &std::path::Path) -> Result<Format> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            Some("pdf") => Ok(Format::Pdf),
            _ => Err(Error::InvalidInput(format!(
                "{}: the figure's file ends in .svg, .png or .pdf",
                path.display()
            ))),
        }
    }
}

/// The figure's bytes in `format`, with its size in pixels.
pub fn encode(figure: &Figure, format: Format) -> Result<(Vec<u8>, (u32, u32))> {
    let (svg, size) = render::svg(figure)?;
    let bytes = match format {
        Format::Svg => svg.into_bytes(),
        Format::Png => export::png(&svg, size)?,
        Format::Pdf => export::pdf(&svg)?,
    };
    Ok((bytes, size))
}
