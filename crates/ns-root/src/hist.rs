//! Histograms: the streamers of TH1 and TH2 with double, float, int, short and char contents,
//! read by hand (ROOT 6 writes TH1 at version 8; base classes and members a histogram does not
//! need are skipped by their byte counts).

use ns_core::Result;

use crate::bytes::Cursor;

/// One axis: its bins and range; `edges` where the bins are not uniform.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub nbins: usize,
    pub min: f64,
    pub max: f64,
    /// The nbins + 1 bin edges of a variable-width axis; `None` for uniform bins.
    pub variable_edges: Option<Vec<f64>>,
}

impl Axis {
    /// The centre of bin `bin` (1-based), as ROOT's `GetBinCenter` computes it.
    pub fn centre(&self, bin: usize) -> f64 {
        match &self.variable_edges {
            Some(edges) if (1..=self.nbins).contains(&bin) => {
                edges[bin - 1] + 0.5 * (edges[bin] - edges[bin - 1])
            }
            _ => {
                let width = (self.max - self.min) / self.nbins as f64;
                self.min + (bin as f64 - 1.0) * width + 0.5 * width
            }
        }
    }

    /// The nbins + 1 bin edges (uniform ones computed as ROOT's `GetBinLowEdge` does).
    pub fn edges(&self) -> Vec<f64> {
        match &self.variable_edges {
            Some(edges) => edges.clone(),
            None => {
                let width = (self.max - self.min) / self.nbins as f64;
                (0..=self.nbins)
                    .map(|i| self.min + i as f64 * width)
                    .collect()
            }
        }
    }
}

/// A histogram as stored: every cell's content in ROOT's global-bin order, under- and overflow
/// included (1-D: underflow, the nbins bins, overflow; 2-D: x fastest, with y's under- and
/// overflow rows), and the sum of squared weights where the histogram keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub class: String,
    pub name: String,
    pub title: String,
    /// x, and y for a 2-D histogram.
    pub axes: Vec<Axis>,
    pub contents: Vec<f64>,
    pub sumw2: Option<Vec<f64>>,
    pub entries: f64,
    /// fTsumw, fTsumw2, fTsumwx, fTsumwx2 as stored (zeros where the histogram was filled by
    /// setting contents: [`Histogram::stats`] then computes them, as ROOT does).
    pub stored_stats: [f64; 4],
}

impl Histogram {
    /// Each cell's error: √sumw2 where stored, else √|content| (ROOT's `GetBinError`).
    pub fn errors(&self) -> Vec<f64> {
        match &self.sumw2 {
            Some(s) => s.iter().map(|v| v.sqrt()).collect(),
            None => self.contents.iter().map(|v| v.abs().sqrt()).collect(),
        }
    }

    /// Σw, Σw², Σwx, Σwx² as ROOT's `GetStats` gives them: the stored sums, or — where none
    /// are stored but the histogram has entries (contents set bin by bin) — sums over the
    /// in-range bins in ROOT's order (w the content, w² the squared error, x the bin centre).
    pub fn stats(&self) -> [f64; 4] {
        if self.stored_stats[0] != 0.0 || self.entries <= 0.0 {
            return self.stored_stats;
        }
        let errors = self.errors();
        let x = &self.axes[0];
        let ny = self.axes.get(1).map_or(0, |y| y.nbins);
        let rows = if self.axes.len() == 2 { 1..=ny } else { 0..=0 };
        let mut stats = [0.0; 4];
        for row in rows {
            for bin in 1..=x.nbins {
                let cell = row * (x.nbins + 2) + bin;
                let (w, err, centre) = (self.contents[cell], errors[cell].abs(), x.centre(bin));
                stats[0] += w;
                stats[1] += err * err;
                stats[2] += w * centre;
                stats[3] += w * centre * centre;
            }
        }
        stats
    }

    /// The contents of the in-range bins (no under- or overflow; 2-D: x fastest).
    pub fn values(&self) -> Vec<f64> {
        self.in_range(&self.contents)
    }

    /// The errors of the in-range bins.
    pub fn value_errors(&self) -> Vec<f64> {
        self.in_range(&self.errors())
    }

    fn in_range(&self, cells: &[f64]) -> Vec<f64> {
        let nx = self.axes[0].nbins;
        match self.axes.get(1) {
            None => cells[1..=nx].to_vec(),
            Some(y) => (1..=y.nbins)
                .flat_map(|j| cells[j * (nx + 2) + 1..=j * (nx + 2) + nx].iter().copied())
                .collect(),
        }
    }
}

/// The histogram classes read, with their dimension and the bytes of one content.
const CLASSES: [(&str, usize, Content); 10] = [
    ("TH1D", 1, Content::F64),
    ("TH1F", 1, Content::F32),
    ("TH1I", 1, Content::I32),
    ("TH1S", 1, Content::I16),
    ("TH1C", 1, Content::I8),
    ("TH2D", 2, Content::F64),
    ("TH2F", 2, Content::F32),
    ("TH2I", 2, Content::I32),
    ("TH2S", 2, Content::I16),
    ("TH2C", 2, Content::I8),
];

#[derive(Clone, Copy)]
enum Content {
    F64,
    F32,
    I32,
    I16,
    I8,
}

/// Whether objects of `class` are histograms this reader reads.
pub(crate) fn is_histogram(class: &str) -> bool {
    CLASSES.iter().any(|(c, ..)| *c == class)
}

/// The histogram classes read, for messages.
pub(crate) fn classes() -> String {
    CLASSES.map(|(c, ..)| c).join(", ")
}

const BYTE_COUNT_MASK: u32 = 0x4000_0000;
/// TObject's bit saying a process id follows.
const IS_REFERENCED: u32 = 1 << 4;

/// A versioned object's header: its version and, where it has a byte count, where it ends.
fn versioned(c: &mut Cursor, what: &str) -> Result<(u16, Option<usize>)> {
    let start = c.pos;
    let word = c.u32(what)?;
    if word & BYTE_COUNT_MASK == 0 {
        c.pos = start;
        return Ok((c.u16(what)?, None));
    }
    let end = c.pos + (word & !BYTE_COUNT_MASK) as usize;
    if end > c.data.len() {
        return Err(c.origin.error(
            start,
            format!(
                "{what} says it is {} bytes long, beyond the {} of the object",
                end - start,
                c.data.len()
            ),
        ));
    }
    Ok((c.u16(what)?, Some(end)))
}

/// Skip a member or base class that carries a byte count.
fn skip(c: &mut Cursor, what: &str) -> Result<()> {
    let start = c.pos;
    match versioned(c, what)? {
        (_, Some(end)) => c.seek(end, start, what),
        (_, None) => Err(c
            .origin
            .error(start, format!("{what} has no byte count to skip it by"))),
    }
}

/// Move to the end of an object read in full, where its byte count says it ends.
fn finish(c: &mut Cursor, end: Option<usize>, start: usize, what: &str) -> Result<()> {
    match end {
        Some(end) => c.seek(end, start, what),
        None => Ok(()),
    }
}

fn tobject(c: &mut Cursor) -> Result<()> {
    versioned(c, "TObject")?;
    c.u32("TObject's fUniqueID")?;
    let bits = c.u32("TObject's fBits")?;
    if bits & IS_REFERENCED != 0 {
        c.u16("TObject's process id")?;
    }
    Ok(())
}

fn tnamed(c: &mut Cursor) -> Result<(String, String)> {
    let start = c.pos;
    let (_, end) = versioned(c, "TNamed")?;
    tobject(c)?;
    let name = c.string("the name")?;
    let title = c.string("the title")?;
    finish(c, end, start, "TNamed")?;
    Ok((name, title))
}

fn array_f64(c: &mut Cursor, what: &str) -> Result<Vec<f64>> {
    let n = c.count(what, 8)?;
    (0..n).map(|_| c.f64(what)).collect()
}

fn contents(c: &mut Cursor, kind: Content) -> Result<Vec<f64>> {
    let what = "the contents";
    let bytes = match kind {
        Content::F64 => 8,
        Content::F32 | Content::I32 => 4,
        Content::I16 => 2,
        Content::I8 => 1,
    };
    let n = c.count(what, bytes)?;
    let raw = c.take(n * bytes, what)?;
    Ok(raw
        .chunks_exact(bytes)
        .map(|b| match kind {
            Content::F64 => f64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            Content::F32 => f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]])),
            Content::I32 => f64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
            Content::I16 => f64::from(i16::from_be_bytes([b[0], b[1]])),
            Content::I8 => f64::from(b[0] as i8),
        })
        .collect())
}

fn axis(c: &mut Cursor, what: &str) -> Result<Axis> {
    let start = c.pos;
    let (_, end) = versioned(c, what)?;
    tnamed(c)?;
    skip(c, "TAttAxis")?;
    let at = c.pos;
    let nbins = c.i32("fNbins")?;
    let min = c.f64("fXmin")?;
    let max = c.f64("fXmax")?;
    let edges = array_f64(c, "fXbins")?;
    finish(c, end, start, what)?;
    let nbins = usize::try_from(nbins)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| c.origin.error(at, format!("{what} has {nbins} bins")))?;
    let variable_edges = match edges.len() {
        0 => None,
        n if n == nbins + 1 => Some(edges),
        n => {
            return Err(c.origin.error(
                at,
                format!("{what} has {nbins} bins but {n} edges (nbins + 1 expected)"),
            ));
        }
    };
    Ok(Axis {
        nbins,
        min,
        max,
        variable_edges,
    })
}

/// The TH1 part: name, title, axes (all three are stored), cell count, entries, stats, sumw2.
struct Th1 {
    name: String,
    title: String,
    ncells: i32,
    axes: [Axis; 3],
    entries: f64,
    stats: [f64; 4],
    sumw2: Vec<f64>,
}

fn th1(c: &mut Cursor) -> Result<Th1> {
    let start = c.pos;
    let (version, end) = versioned(c, "TH1")?;
    if !(5..=8).contains(&version) {
        return Err(c.origin.error(
            start,
            format!("TH1 version {version}: this reader reads versions 5 to 8 (ROOT 5.x to 6.x)"),
        ));
    }
    let (name, title) = tnamed(c)?;
    for base in ["TAttLine", "TAttFill", "TAttMarker"] {
        skip(c, base)?;
    }
    let ncells = c.i32("fNcells")?;
    let axes = [axis(c, "fXaxis")?, axis(c, "fYaxis")?, axis(c, "fZaxis")?];
    c.i16("fBarOffset")?;
    c.i16("fBarWidth")?;
    let entries = c.f64("fEntries")?;
    let stats = [
        c.f64("fTsumw")?,
        c.f64("fTsumw2")?,
        c.f64("fTsumwx")?,
        c.f64("fTsumwx2")?,
    ];
    c.f64("fMaximum")?;
    c.f64("fMinimum")?;
    c.f64("fNormFactor")?;
    array_f64(c, "fContour")?;
    let sumw2 = array_f64(c, "fSumw2")?;
    // The rest (option, functions, buffer, statistics options) is not needed.
    if end.is_none() {
        return Err(c
            .origin
            .error(start, "TH1 has no byte count to skip its last members by"));
    }
    finish(c, end, start, "TH1")?;
    Ok(Th1 {
        name,
        title,
        ncells,
        axes,
        entries,
        stats,
        sumw2,
    })
}

/// The histogram of class `class` in `c`'s object bytes.
pub(crate) fn read(c: &mut Cursor, class: &str) -> Result<Histogram> {
    let Some(&(_, dimension, kind)) = CLASSES.iter().find(|(k, ..)| *k == class) else {
        return Err(c.error(format!(
            "an object of class {class} is not a histogram this reader reads ({})",
            classes()
        )));
    };
    let start = c.pos;
    let (_, end) = versioned(c, class)?;
    let th1 = if dimension == 2 {
        let th2_start = c.pos;
        let (_, th2_end) = versioned(c, "TH2")?;
        let th1 = th1(c)?;
        // fScalefactor, fTsumwy, fTsumwy2, fTsumwxy.
        finish(c, th2_end, th2_start, "TH2")?;
        th1
    } else {
        th1(c)?
    };
    let at = c.pos;
    let contents = contents(c, kind)?;
    finish(c, end, start, class)?;
    let [x, y, _] = th1.axes;
    let axes = if dimension == 2 { vec![x, y] } else { vec![x] };
    let cells: usize = axes.iter().map(|a| a.nbins + 2).product();
    if contents.len() != cells || usize::try_from(th1.ncells) != Ok(cells) {
        return Err(c.origin.error(
            at,
            format!(
                "{class} '{}' has {} contents and fNcells {} for axes of {} cells",
                th1.name,
                contents.len(),
                th1.ncells,
                cells
            ),
        ));
    }
    let sumw2 = match th1.sumw2.len() {
        0 => None,
        n if n == cells => Some(th1.sumw2),
        n => {
            return Err(c.origin.error(
                at,
                format!(
                    "{class} '{}' has {n} sums of squared weights for {cells} cells",
                    th1.name
                ),
            ));
        }
    };
    Ok(Histogram {
        class: class.to_string(),
        name: th1.name,
        title: th1.title,
        axes,
        contents,
        sumw2,
        entries: th1.entries,
        stored_stats: th1.stats,
    })
}
