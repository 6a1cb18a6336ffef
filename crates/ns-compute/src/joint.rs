//! A likelihood that is the product of others whose parameters are shared by name: RooFit's
//! simultaneous pdf over channels of different kinds (HS3 `histfactory_dist` channels beside
//! unbinned ones). Each part keeps its own evaluator on the device asked; the joint NLL is the
//! sum of the parts' NLLs, its gradient their gradients scattered onto the shared parameters.
//!
//! A joint dataset is the parts' datasets one after another. Its `main` starts with a header of
//! three numbers per part — the part's main length, auxiliary length and constant — so that it
//! splits back into the parts' datasets exactly; its `aux` is the parts' auxiliary data in order.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use ns_core::{Error, Result};

use crate::backend::{Backend, Batching, Datasets, Precision, Resident, SampledToys, SignalBatch};
use crate::cpu::HessianPart;
use crate::data::PreparedData;
use crate::device::{Device, Workload};
use crate::likelihood::{ChannelYields, Likelihood};
use crate::signal::ExternalSignal;

/// Header numbers per part at the start of a joint dataset's `main`.
const HEADER: usize = 3;

/// One factor of a [`JointLikelihood`] and where its parameters sit among the joint ones.
struct Part {
    likelihood: Box<dyn Likelihood>,
    /// The joint index of each of the part's parameters.
    map: Vec<usize>,
}

/// The product of likelihoods sharing parameters by name.
pub struct JointLikelihood {
    origin: String,
    names: Vec<String>,
    parts: Vec<Part>,
    init: Vec<f64>,
    bounds: Vec<(f64, f64)>,
    fixed: Vec<bool>,
    poi: std::result::Result<usize, String>,
}

impl JointLikelihood {
    /// The product of `parts`, each with the names its parameters take in the product (a
    /// part's own names may differ, as a binned reader's do from the file's). A shared
    /// parameter takes the intersection of its ranges and its first part's start, clamped
    /// into it; it is fixed where any part fixes it. `poi` names the parameter of interest.
    pub fn new(
        origin: String,
        parts: Vec<(Box<dyn Likelihood>, Vec<String>)>,
        poi: Option<&str>,
    ) -> Result<Self> {
        if parts.len() < 2 {
            return Err(Error::InvalidModel(format!(
                "{origin}: a joint likelihood needs at least two parts"
            )));
        }
        let mut names: Vec<String> = Vec::new();
        let mut init = Vec::new();
        let mut bounds: Vec<(f64, f64)> = Vec::new();
        let mut fixed = Vec::new();
        let mut joined = Vec::with_capacity(parts.len());
        for (likelihood, shared_names) in parts {
            if shared_names.len() != likelihood.n_params() {
                return Err(Error::InvalidModel(format!(
                    "{origin}: {} names for the {} parameters of {}",
                    shared_names.len(),
                    likelihood.n_params(),
                    likelihood.origin()
                )));
            }
            let (part_init, part_bounds, part_fixed) = (
                likelihood.suggested_init(),
                likelihood.suggested_bounds(),
                likelihood.suggested_fixed(),
            );
            let mut map = Vec::with_capacity(shared_names.len());
            for (i, name) in shared_names.into_iter().enumerate() {
                if map.iter().any(|&j| names[j] == name) {
                    return Err(Error::InvalidModel(format!(
                        "{origin}: two parameters of {} are both '{name}'",
                        likelihood.origin()
                    )));
                }
                let (lo, hi) = part_bounds[i];
                match names.iter().position(|n| *n == name) {
                    Some(j) => {
                        let (a, b) = (bounds[j].0.max(lo), bounds[j].1.min(hi));
                        if a > b {
                            return Err(Error::InvalidModel(format!(
                                "{origin}: parameter '{name}' is bounded to [{}, {}] in one part \
                                 and to [{lo}, {hi}] in {}: the ranges do not meet",
                                bounds[j].0,
                                bounds[j].1,
                                likelihood.origin()
                            )));
                        }
                        bounds[j] = (a, b);
                        init[j] = f64::clamp(init[j], a, b);
                        fixed[j] |= part_fixed[i];
                        map.push(j);
                    }
                    None => {
                        names.push(name);
                        init.push(part_init[i]);
                        bounds.push((lo, hi));
                        fixed.push(part_fixed[i]);
                        map.push(names.len() - 1);
                    }
                }
            }
            joined.push(Part { likelihood, map });
        }
        let poi = match poi {
            Some(p) => names.iter().position(|n| n == p).ok_or_else(|| {
                format!("the parameter of interest '{p}' is not a parameter of {origin}")
            }),
            None => Err(format!("{origin} names no parameter of interest")),
        };
        Ok(JointLikelihood {
            origin,
            names,
            parts: joined,
            init,
            bounds,
            fixed,
            poi,
        })
    }

    /// `params` (joint) as `part`'s parameter vector.
    fn local(&self, part: &Part, params: &[f64]) -> Result<Vec<f64>> {
        if params.len() != self.names.len() {
            return Err(Error::InvalidInput(format!(
                "{} parameter values for the {} parameters of {}",
                params.len(),
                self.names.len(),
                self.origin
            )));
        }
        Ok(part.map.iter().map(|&j| params[j]).collect())
    }

    /// The part owning joint parameter `index` first, and the index there.
    fn owner(&self, index: usize) -> Option<(&Part, usize)> {
        self.parts
            .iter()
            .find_map(|p| p.map.iter().position(|&j| j == index).map(|i| (p, i)))
    }

    /// Apply `f` to each part with its own parameters.
    fn each<T>(
        &self,
        params: &[f64],
        f: impl Fn(&dyn Likelihood, &[f64]) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.parts
            .iter()
            .map(|p| f(p.likelihood.as_ref(), &self.local(p, params)?))
            .collect()
    }

    fn open_parts<'a>(
        &'a self,
        mut open: impl FnMut(&'a dyn Likelihood) -> Result<Box<dyn Backend + 'a>>,
    ) -> Result<Box<dyn Backend + 'a>> {
        let parts = self
            .parts
            .iter()
            .map(|p| Ok((open(p.likelihood.as_ref())?, p.map.as_slice())))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(JointBackend {
            parts,
            n_params: self.names.len(),
            last_host: Mutex::new(None),
        }))
    }
}

/// The parts' datasets as one joint dataset.
fn join(datasets: Vec<PreparedData>) -> PreparedData {
    let mut main = Vec::with_capacity(
        HEADER * datasets.len() + datasets.iter().map(|d| d.main.len()).sum::<usize>(),
    );
    for d in &datasets {
        main.extend([d.main.len() as f64, d.aux.len() as f64, d.constant]);
    }
    let mut aux = Vec::new();
    let mut constant = 0.0;
    for d in datasets {
        main.extend(d.main);
        aux.extend(d.aux);
        constant += d.constant;
    }
    PreparedData {
        main,
        aux,
        constant,
    }
}

/// A joint dataset split into the parts' datasets (borrowing nothing: parts own their data).
fn split(data: &PreparedData, n_parts: usize) -> Result<Vec<PreparedData>> {
    let corrupt = || {
        Error::InvalidInput(format!(
            "a dataset of {} values is not a joint dataset of {n_parts} parts",
            data.main.len()
        ))
    };
    let header = data.main.get(..HEADER * n_parts).ok_or_else(corrupt)?;
    let (mut main_at, mut aux_at) = (HEADER * n_parts, 0);
    header
        .chunks_exact(HEADER)
        .map(|h| {
            let length = |v: f64| {
                (v >= 0.0 && v.fract() == 0.0 && v <= data.main.len() as f64)
                    .then_some(v as usize)
                    .ok_or_else(corrupt)
            };
            let (m, a) = (length(h[0])?, length(h[1])?);
            let main = data.main.get(main_at..main_at + m).ok_or_else(corrupt)?;
            let aux = data.aux.get(aux_at..aux_at + a).ok_or_else(corrupt)?;
            main_at += m;
            aux_at += a;
            Ok(PreparedData {
                main: main.to_vec(),
                aux: aux.to_vec(),
                constant: h[2],
            })
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|parts| {
            (main_at == data.main.len() && aux_at == data.aux.len())
                .then_some(parts)
                .ok_or_else(corrupt)
        })
}

impl Likelihood for JointLikelihood {
    fn parameter_names(&self) -> &[String] {
        &self.names
    }

    fn origin(&self) -> String {
        self.origin.clone()
    }

    fn suggested_init(&self) -> Vec<f64> {
        self.init.clone()
    }

    fn suggested_bounds(&self) -> Vec<(f64, f64)> {
        self.bounds.clone()
    }

    fn suggested_fixed(&self) -> Vec<bool> {
        self.fixed.clone()
    }

    fn poi(&self) -> Result<usize> {
        self.poi.clone().map_err(Error::InvalidModel)
    }

    fn parameter_kind(&self, index: usize) -> &str {
        // The first part that constrains it says what it is; else its first part.
        self.parts
            .iter()
            .find_map(|p| {
                let i = p.map.iter().position(|&j| j == index)?;
                p.likelihood
                    .constraint(i)
                    .is_some()
                    .then(|| p.likelihood.parameter_kind(i))
            })
            .or_else(|| {
                self.owner(index)
                    .map(|(p, i)| p.likelihood.parameter_kind(i))
            })
            .unwrap_or("free")
    }

    fn constraint(&self, index: usize) -> Option<(f64, f64)> {
        self.parts.iter().find_map(|p| {
            let i = p.map.iter().position(|&j| j == index)?;
            p.likelihood.constraint(i)
        })
    }

    /// The yields of the parts that have samples (the binned channels).
    fn sample_yields(&self, params: &[f64]) -> Result<Vec<ChannelYields>> {
        let per_part = self.each(params, |l, p| Ok(l.sample_yields(p).ok()))?;
        let yields: Vec<ChannelYields> = per_part.into_iter().flatten().flatten().collect();
        if yields.is_empty() {
            return Err(Error::InvalidInput(format!(
                "{}: none of its parts has per-sample yields",
                self.origin
            )));
        }
        Ok(yields)
    }

    fn observed(&self) -> Result<PreparedData> {
        let datasets = self
            .parts
            .iter()
            .map(|p| p.likelihood.observed())
            .collect::<Result<Vec<_>>>()?;
        Ok(join(datasets))
    }

    fn dataset(&self, _values: &[f64]) -> Result<PreparedData> {
        Err(Error::InvalidInput(format!(
            "{} joins binned and unbinned channels: its data come from its file, not from a \
             list of values",
            self.origin
        )))
    }

    fn asimov(&self, params: &[f64]) -> Result<PreparedData> {
        let datasets = self.each(params, |l, p| l.asimov(p))?;
        Ok(join(datasets))
    }

    fn expected(&self, params: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let (mut main, mut aux) = (Vec::new(), Vec::new());
        for (m, a) in self.each(params, |l, p| l.expected(p))? {
            main.extend(m);
            aux.extend(a);
        }
        Ok((main, aux))
    }

    /// Each part draws its toys on the host from its own key (the seed, advanced by the part's
    /// index), so the parts' toys are independent and toy `i` is the same on every device.
    fn sample_toys(
        &self,
        backend: &dyn Backend,
        ensembles: &[(&[f64], u32)],
        seed: u64,
        first: u32,
        n_toys: usize,
    ) -> Result<SampledToys> {
        let mut per_part = Vec::with_capacity(self.parts.len());
        for (k, part) in self.parts.iter().enumerate() {
            let local = ensembles
                .iter()
                .map(|&(params, stream)| Ok((self.local(part, params)?, stream)))
                .collect::<Result<Vec<_>>>()?;
            let borrowed: Vec<(&[f64], u32)> =
                local.iter().map(|(p, s)| (p.as_slice(), *s)).collect();
            let key = seed.wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let toys = part
                .likelihood
                .sample_toys(backend, &borrowed, key, first, n_toys)?;
            if toys.host.len() != ensembles.len() * n_toys {
                return Err(Error::Computation(format!(
                    "{} sampled its toys on the device; a joint likelihood joins them on the host",
                    part.likelihood.origin()
                )));
            }
            per_part.push(toys.host.into_iter());
        }
        let host = (0..ensembles.len() * n_toys)
            .map(|_| join(per_part.iter_mut().filter_map(Iterator::next).collect()))
            .collect();
        Ok(SampledToys {
            host,
            resident: None,
        })
    }

    fn dataset_size(&self) -> usize {
        self.parts
            .iter()
            .map(|p| HEADER + p.likelihood.dataset_size())
            .sum()
    }

    fn open(&self, device: Device) -> Result<Box<dyn Backend + '_>> {
        self.open_parts(|l| l.open(device))
    }

    fn open_for_fits(&self, device: Device) -> Result<Box<dyn Backend + '_>> {
        self.open_parts(|l| l.open_for_fits(device))
    }

    fn held_at_kinks(&self, params: &[f64]) -> Result<bool> {
        Ok(self
            .each(params, |l, p| l.held_at_kinks(p))?
            .contains(&true))
    }

    /// The parts with kinks smoothed, the others as fits see them on the CPU.
    fn open_smoothed(&self, width: f64) -> Option<Box<dyn Backend + '_>> {
        let smoothed: Vec<_> = self
            .parts
            .iter()
            .map(|p| p.likelihood.open_smoothed(width))
            .collect();
        if smoothed.iter().all(Option::is_none) {
            return None;
        }
        let mut smoothed = smoothed.into_iter();
        self.open_parts(|l| match smoothed.next().flatten() {
            Some(b) => Ok(b),
            None => l.open_for_fits(Device::Cpu),
        })
        .ok()
    }

    /// Worth a GPU where every part is.
    fn worth_a_gpu(&self, workload: Workload) -> bool {
        !self.parts.is_empty()
            && self
                .parts
                .iter()
                .all(|p| p.likelihood.worth_a_gpu(workload))
    }

    fn analytic_parameters(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self
            .parts
            .iter()
            .flat_map(|p| {
                p.likelihood
                    .analytic_parameters()
                    .into_iter()
                    .map(|i| p.map[i])
            })
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    fn profile_analytic(&self, params: &mut [f64], data: &PreparedData) -> Result<()> {
        let datasets = split(data, self.parts.len())?;
        for (part, data) in self.parts.iter().zip(&datasets) {
            if part.likelihood.analytic_parameters().is_empty() {
                continue;
            }
            let mut local = self.local(part, params)?;
            part.likelihood.profile_analytic(&mut local, data)?;
            for (&j, v) in part.map.iter().zip(local) {
                params[j] = v;
            }
        }
        Ok(())
    }

    fn where_undefined(&self, params: &[f64], data: &PreparedData) -> Option<String> {
        let datasets = split(data, self.parts.len()).ok()?;
        self.parts.iter().zip(&datasets).find_map(|(part, data)| {
            let local = self.local(part, params).ok()?;
            let why = part.likelihood.where_undefined(&local, data)?;
            Some(format!("{}: {why}", part.likelihood.origin()))
        })
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        self.parts
            .iter()
            .flat_map(|p| p.likelihood.settings())
            .collect()
    }
}

/// The parts' backends of one device.
struct JointBackend<'a> {
    parts: Vec<(Box<dyn Backend + 'a>, &'a [usize])>,
    n_params: usize,
    /// The host datasets last evaluated and their upload: a host-driven fit passes the same
    /// dataset at every step, which is then split (and sent to a device) once, not per step.
    last_host: Mutex<Option<(Vec<PreparedData>, Arc<Resident>)>>,
}

impl JointBackend<'_> {
    /// `datasets` uploaded, or the upload of the same datasets kept from the last call.
    fn uploaded(&self, datasets: &[PreparedData]) -> Result<Arc<Resident>> {
        let mut last = self.last_host.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((held, resident)) = last.as_ref()
            && held.as_slice() == datasets
        {
            return Ok(resident.clone());
        }
        let resident = Arc::new(self.upload(datasets)?);
        *last = Some((datasets.to_vec(), resident.clone()));
        Ok(resident)
    }
}

/// Datasets uploaded by each part's backend.
struct JointResident(Vec<Resident>);

impl Backend for JointBackend<'_> {
    fn device(&self) -> Device {
        self.parts[0].0.device()
    }

    fn description(&self) -> String {
        let parts: Vec<String> = self.parts.iter().map(|(b, _)| b.description()).collect();
        parts.join(" + ")
    }

    fn batching(&self) -> Batching {
        if self
            .parts
            .iter()
            .any(|(b, _)| b.batching() == Batching::Lockstep)
        {
            Batching::Lockstep
        } else {
            Batching::Parallel
        }
    }

    fn precision(&self) -> Precision {
        if self
            .parts
            .iter()
            .any(|(b, _)| b.precision() == Precision::F32)
        {
            Precision::F32
        } else {
            Precision::F64
        }
    }

    fn upload(&self, datasets: &[PreparedData]) -> Result<Resident> {
        let n = self.parts.len();
        let mut per_part: Vec<Vec<PreparedData>> = vec![Vec::with_capacity(datasets.len()); n];
        for d in datasets {
            for (k, part) in split(d, n)?.into_iter().enumerate() {
                per_part[k].push(part);
            }
        }
        let resident = self
            .parts
            .iter()
            .zip(&per_part)
            .map(|((b, _), data)| b.upload(data))
            .collect::<Result<Vec<_>>>()?;
        Ok(Resident::new(datasets.len(), JointResident(resident)))
    }

    fn nll_grad_batch(
        &self,
        points: &[f64],
        datasets: Datasets,
        which: &[u32],
        nll: &mut [f64],
        grad: &mut [f64],
        stop: &AtomicBool,
    ) -> Result<()> {
        let held = match datasets {
            Datasets::Host(h) => h.len(),
            Datasets::Resident(r) => r.len(),
        };
        crate::backend::check_batch(points, which, nll, grad, self.n_params, held)?;
        let uploaded;
        let resident = match datasets {
            Datasets::Resident(r) => r.storage::<JointResident>()?,
            Datasets::Host(h) => {
                uploaded = self.uploaded(h)?;
                uploaded.storage::<JointResident>()?
            }
        };
        let rows = which.len();
        nll.fill(0.0);
        grad.fill(0.0);
        for ((backend, map), data) in self.parts.iter().zip(&resident.0) {
            let n = map.len();
            let local: Vec<f64> = points
                .chunks_exact(self.n_params)
                .flat_map(|row| map.iter().map(move |&j| row[j]))
                .collect();
            let (mut part_nll, mut part_grad) = (vec![0.0; rows], vec![0.0; rows * n]);
            backend.nll_grad_batch(
                &local,
                Datasets::Resident(data),
                which,
                &mut part_nll,
                &mut part_grad,
                stop,
            )?;
            for row in 0..rows {
                nll[row] += part_nll[row];
                let g = &mut grad[row * self.n_params..(row + 1) * self.n_params];
                for (&j, d) in map.iter().zip(&part_grad[row * n..(row + 1) * n]) {
                    g[j] += d;
                }
            }
        }
        Ok(())
    }

    /// The parts' Hessians added onto the shared parameters, where every part computes its own.
    fn nll_hessian(
        &self,
        point: &[f64],
        data: &PreparedData,
        part: HessianPart,
    ) -> Result<Option<Vec<f64>>> {
        let n = self.n_params;
        let datasets = split(data, self.parts.len())?;
        let mut total = vec![
            0.0;
            match part {
                HessianPart::Full => n * n,
                HessianPart::Diagonal => n,
            }
        ];
        for ((backend, map), data) in self.parts.iter().zip(&datasets) {
            let local: Vec<f64> = map.iter().map(|&j| point[j]).collect();
            let Some(h) = backend.nll_hessian(&local, data, part)? else {
                return Ok(None);
            };
            let m = map.len();
            match part {
                HessianPart::Full => {
                    for (a, &ja) in map.iter().enumerate() {
                        for (b, &jb) in map.iter().enumerate() {
                            total[ja * n + jb] += h[a * m + b];
                        }
                    }
                }
                HessianPart::Diagonal => {
                    for (a, &ja) in map.iter().enumerate() {
                        total[ja] += h[a];
                    }
                }
            }
        }
        Ok(Some(total))
    }

    fn attach_signal(&self, _: &ExternalSignal) -> Result<Resident> {
        Err(no_signals())
    }

    fn nll_grad_signal(&self, _: &Resident, _: SignalBatch) -> Result<()> {
        Err(no_signals())
    }
}

fn no_signals() -> Error {
    Error::InvalidInput(
        "external signal yields apply to binned (HistFactory) models, not to a joint binned + \
         unbinned likelihood"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(main: &[f64], aux: &[f64], constant: f64) -> PreparedData {
        PreparedData {
            main: main.to_vec(),
            aux: aux.to_vec(),
            constant,
        }
    }

    #[test]
    fn a_joint_dataset_splits_into_its_parts() {
        let parts = vec![
            data(&[3.0, 4.0], &[1.0], 0.5),
            data(&[0.0, 2.0, 1.5, 7.0], &[], -2.0),
            data(&[], &[0.25, 0.75], 0.0),
        ];
        let joint = join(parts.clone());
        assert_eq!(joint.constant, -1.5);
        assert_eq!(joint.aux, [1.0, 0.25, 0.75]);
        assert_eq!(split(&joint, 3).unwrap(), parts);
    }

    #[test]
    fn a_dataset_that_is_not_joint_is_refused() {
        let joint = join(vec![data(&[3.0, 4.0], &[1.0], 0.5), data(&[1.0], &[], 0.0)]);
        let mut cases = vec![(data(&[1.0], &[], 0.0), 2), (joint.clone(), 3)];
        for (at, bad) in [(0, 2.5), (0, -1.0), (0, 1e300), (1, 7.0), (3, 4.0)] {
            let mut d = joint.clone();
            d.main[at] = bad;
            cases.push((d, 2));
        }
        let mut short_aux = joint.clone();
        short_aux.aux.clear();
        cases.push((short_aux, 2));
        for (d, parts) in cases {
            let error = split(&d, parts).unwrap_err().to_string();
            assert!(error.contains("is not a joint dataset"), "{error}");
        }
    }
}
