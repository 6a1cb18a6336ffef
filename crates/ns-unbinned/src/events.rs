//! Events as the likelihood interface carries them: a [`PreparedData`] whose `main` holds, per
//! channel, a header (event count, whether weighted) followed by one column per observable and
//! the weights where the channel is weighted (structure of arrays); `aux` holds the global
//! observables.

use ns_compute::PreparedData;
use ns_core::{Error, Result};

use crate::model::Axis;

/// The events of one channel: one column per observable (in the channel's axis order) and the
/// weights where they are weighted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelEvents {
    pub columns: Vec<Vec<f64>>,
    pub weights: Option<Vec<f64>>,
}

impl ChannelEvents {
    pub fn len(&self) -> usize {
        self.columns.first().map_or(0, Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Σ w (the count where unweighted).
    pub fn sum_weights(&self) -> f64 {
        match &self.weights {
            Some(w) => w.iter().sum(),
            None => self.len() as f64,
        }
    }
}

/// Borrowed columns of one channel's events.
#[derive(Clone, Copy, Debug)]
pub struct ChannelView<'a> {
    data: &'a [f64],
    n: usize,
    dims: usize,
    weighted: bool,
}

impl<'a> ChannelView<'a> {
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn column(&self, i: usize) -> &'a [f64] {
        &self.data[i * self.n..(i + 1) * self.n]
    }

    pub fn weights(&self) -> Option<&'a [f64]> {
        self.weighted
            .then(|| &self.data[self.dims * self.n..(self.dims + 1) * self.n])
    }

    pub fn dims(&self) -> usize {
        self.dims
    }
}

/// Pack channels into a dataset.
pub fn pack(channels: &[ChannelEvents], aux: Vec<f64>, constant: f64) -> PreparedData {
    let values: usize = channels
        .iter()
        .map(|c| 2 + c.len() * (c.columns.len() + usize::from(c.weights.is_some())))
        .sum();
    let mut main = Vec::with_capacity(values);
    for c in channels {
        main.push(c.len() as f64);
        main.push(if c.weights.is_some() { 1.0 } else { 0.0 });
        for col in &c.columns {
            main.extend_from_slice(col);
        }
        if let Some(w) = &c.weights {
            main.extend_from_slice(w);
        }
    }
    PreparedData {
        main,
        aux,
        constant,
    }
}

/// The channels of a packed dataset, each with `dims[c]` observables; an error for data this
/// layout did not make.
pub fn views<'a>(main: &'a [f64], dims: &[usize]) -> Result<Vec<ChannelView<'a>>> {
    let bad = || {
        Error::InvalidInput(
            "the dataset is not event data of this unbinned model (its layout does not match)"
                .into(),
        )
    };
    let mut at = 0;
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let header = main.get(at..at + 2).ok_or_else(bad)?;
        let (n, weighted) = (header[0], header[1]);
        if !(n >= 0.0 && n.fract() == 0.0) || !(weighted == 0.0 || weighted == 1.0) {
            return Err(bad());
        }
        let (n, weighted) = (n as usize, weighted == 1.0);
        let len = n * (d + usize::from(weighted));
        let data = main.get(at + 2..at + 2 + len).ok_or_else(bad)?;
        out.push(ChannelView {
            data,
            n,
            dims: d,
            weighted,
        });
        at += 2 + len;
    }
    if at != main.len() {
        return Err(bad());
    }
    Ok(out)
}

/// Every value finite and inside its axis's range; weights one per event and finite. `what`
/// names the events in messages ("data 'obs'").
pub(crate) fn check_events(events: &ChannelEvents, axes: &[Axis], what: &str) -> Result<()> {
    for (axis, col) in axes.iter().zip(&events.columns) {
        if let Some((i, x)) = col
            .iter()
            .enumerate()
            .find(|(_, x)| !(**x >= axis.lo && **x <= axis.hi))
        {
            return Err(Error::InvalidInput(format!(
                "{what}: event {i} has {} = {}, outside its range [{}, {}]: nextstat refuses events outside the observable's range (select them out, or widen the range)",
                axis.name,
                crate::model::short(*x),
                crate::model::short(axis.lo),
                crate::model::short(axis.hi)
            )));
        }
    }
    if let Some(w) = &events.weights {
        if w.len() != events.len() {
            return Err(Error::InvalidInput(format!(
                "{what} has {} weights for {} events",
                w.len(),
                events.len()
            )));
        }
        if let Some((i, x)) = w.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            return Err(Error::InvalidInput(format!(
                "{what}: weight {i} is {}; weights must be finite",
                crate::model::short(*x)
            )));
        }
    }
    Ok(())
}
