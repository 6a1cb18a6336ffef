//! Which parameters scale which processes: Combine's default physics model (the POI `r` on every
//! signal process), or `multiSignalModel`'s maps (`text2workspace.py -P
//! HiggsAnalysis.CombinedLimit.PhysicsModel:multiSignalModel --PO 'map=…'`), given as the same
//! `--PO` strings: `map=PATTERN[,PATTERN…]:POI[init,min,max]` scales every process whose
//! `bin/process` a pattern matches (from its start, as Python's `re.match`) by the POI, declared
//! with its start and range where first named; `:1` leaves the processes as they are and `:0`
//! removes them; `turnoff=P1,P2` is `map=.*/(P1|P2):0`. The last map that matches a process
//! decides; a process no map matches is not scaled, signal or not. The model's POI is the first
//! declared; the others float as normfactors.

use regex::Regex;

use ns_core::{Error, Result};

/// The longest option read, and the most options: a bound on what a hostile request compiles.
const MAX_OPTION: usize = 2000;
const MAX_OPTIONS: usize = 200;

/// What scales a process.
#[derive(Clone, Debug, PartialEq)]
pub enum Scale {
    /// The POI of that name.
    Poi(String),
    /// A constant: 1 (not scaled) or 0 (removed).
    Constant(f64),
}

/// A POI a map declares: its name, start and range.
#[derive(Clone, Debug, PartialEq)]
pub struct Poi {
    pub name: String,
    pub init: f64,
    pub bounds: (f64, f64),
}

/// The physics model's maps, in the order given.
#[derive(Clone, Debug, Default)]
pub struct SignalMaps {
    maps: Vec<(Vec<Regex>, Scale)>,
    pub pois: Vec<Poi>,
}

impl SignalMaps {
    /// The maps of `options` (`--PO` strings); empty options: Combine's default model.
    pub fn parse(options: &[String]) -> Result<Self> {
        if options.len() > MAX_OPTIONS {
            return Err(Error::InvalidInput(format!(
                "{} physics-model options (at most {MAX_OPTIONS})",
                options.len()
            )));
        }
        let mut maps = SignalMaps::default();
        for option in options {
            let refuse =
                |why: &str| Error::InvalidInput(format!("physics-model option '{option}': {why}"));
            if option.len() > MAX_OPTION {
                return Err(refuse(&format!("longer than {MAX_OPTION} characters")));
            }
            let map = if let Some(processes) = option.strip_prefix("turnoff=") {
                format!("map=.*/({}):0", processes.replace(',', "|"))
            } else if option == "verbose" {
                continue;
            } else {
                option.clone()
            };
            let Some((patterns, target)) = map.strip_prefix("map=").and_then(|m| m.split_once(':'))
            else {
                return Err(refuse(
                    "the options read are map=BIN/PROCESS[,…]:POI[init,min,max] (or :1, :0) \
                     and turnoff=PROCESS[,…] (multiSignalModel's)",
                ));
            };
            let patterns = patterns
                .split(',')
                .map(|p| crate::edit::compiled(p, ""))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| refuse(&format!("a pattern does not read: {e}")))?;
            let scale = match target {
                "1" | "0" => Scale::Constant(if target == "1" { 1.0 } else { 0.0 }),
                t if t == "super" || t.contains('=') => {
                    return Err(refuse(
                        "expressions and 'super' are not built yet (a map names a POI, 1 or 0)",
                    ));
                }
                t => {
                    let name = t.split('[').next().unwrap_or(t).trim();
                    if name.is_empty()
                        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(refuse(&format!("'{name}' is not a parameter name")));
                    }
                    if let Some(range) = t.strip_prefix(name)
                        && !range.is_empty()
                    {
                        maps.declare(name, range).map_err(|why| refuse(&why))?;
                    }
                    if !maps.pois.iter().any(|p| p.name == name) {
                        return Err(refuse(&format!(
                            "POI '{name}' is named before it is declared with \
                             {name}[init,min,max]"
                        )));
                    }
                    Scale::Poi(name.into())
                }
            };
            maps.maps.push((patterns, scale));
        }
        if !maps.maps.is_empty() && maps.pois.is_empty() {
            return Err(Error::InvalidInput(
                "the physics-model maps declare no POI (map=…:NAME[init,min,max])".into(),
            ));
        }
        Ok(maps)
    }

    /// Whether Combine's default model applies (no maps).
    pub fn is_default(&self) -> bool {
        self.maps.is_empty()
    }

    /// What scales `process` in `bin`: the last map matching `bin/process`.
    pub fn scale(&self, bin: &str, process: &str) -> Scale {
        let key = format!("{bin}/{process}");
        self.maps
            .iter()
            .rev()
            .find(|(patterns, _)| patterns.iter().any(|p| p.is_match(&key)))
            .map_or(Scale::Constant(1.0), |(_, scale)| scale.clone())
    }

    /// `[init,min,max]` (or `[init]`) of POI `name`, its first declaration.
    fn declare(&mut self, name: &str, range: &str) -> std::result::Result<(), String> {
        let inner = range
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(|| format!("'{range}' is not [init,min,max]"))?;
        let values = inner
            .split(',')
            .map(|v| v.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
            .collect::<Option<Vec<f64>>>()
            .ok_or_else(|| format!("'{range}' holds something that is not a number"))?;
        let (init, bounds) = match values[..] {
            [init, min, max] if min < max && (min..=max).contains(&init) => (init, (min, max)),
            [min, max] if min < max => (min, (min, max)),
            _ => {
                return Err(format!(
                    "'{range}' is not [init,min,max] with min ≤ init ≤ max"
                ));
            }
        };
        if !self.pois.iter().any(|p| p.name == name) {
            self.pois.push(Poi {
                name: name.into(),
                init,
                bounds,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_read_as_multi_signal_models() {
        let maps = SignalMaps::parse(&[
            "map=.*/ggH:r_ggH[1,0,10]".into(),
            "map=.*/qqH,.*/VH:r_qqH[1,-5,5]".into(),
            "map=ch2/VH:0".into(),
            "turnoff=ttH".into(),
        ])
        .unwrap();
        assert_eq!(maps.pois.len(), 2);
        assert_eq!(maps.pois[1].bounds, (-5.0, 5.0));
        assert_eq!(maps.scale("ch1", "ggH"), Scale::Poi("r_ggH".into()));
        assert_eq!(maps.scale("ch1", "VH"), Scale::Poi("r_qqH".into()));
        assert_eq!(maps.scale("ch2", "VH"), Scale::Constant(0.0));
        assert_eq!(maps.scale("ch1", "ttH"), Scale::Constant(0.0));
        assert_eq!(maps.scale("ch1", "bkg"), Scale::Constant(1.0));
        assert!(SignalMaps::parse(&[]).unwrap().is_default());
        for (bad, why) in [
            ("map=.*/ggH:r[1,2,0]", "not [init,min,max]"),
            ("map=.*/ggH:r[a,0,1]", "not a number"),
            ("map=.*/ggH:r", "named before it is declared"),
            ("map=.*/ggH:r=expr(…)", "not built yet"),
            ("map=(:r[1,0,1]", "does not read"),
            ("map=(a{1000}){1000}:r[1,0,1]", "does not read"),
            ("squash=.*", "the options read are"),
            ("map=.*/ggH:1", "declare no POI"),
        ] {
            let e = SignalMaps::parse(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
