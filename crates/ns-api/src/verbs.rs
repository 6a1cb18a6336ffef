//! The verb registry: one descriptor per request, from which every front end takes the verb's
//! names (the call's `request.verb`, the CLI subcommand, the server's route), its one-line
//! summary (CLI help, OpenAPI), its Python result class, what a shard splits it into, and how
//! its progress counts. A new verb is a `Request` variant with its run and report, and one line
//! here (docs/ARCHITECTURE.md, "Add a verb").

use crate::request::Request;

/// How every front end names and presents one verb.
#[derive(Debug)]
pub struct Verb {
    /// The call's `request.verb`.
    pub name: &'static str,
    /// The CLI subcommand and the server's route (`/v1/ROUTE`); `None` for a request only the
    /// Python package makes (toy batches).
    pub route: Option<&'static str>,
    /// What it answers, in one line.
    pub summary: &'static str,
    /// The Python result class (`nextstat.RESULT`); `None`: a plain dict.
    pub result: Option<&'static str>,
    /// What a shard splits it into, in words; `None`: it is not sharded.
    pub units: Option<&'static str>,
    /// Progress steps per unit of a shard (a toy test fits two ensembles; a ranked parameter up
    /// to four refits).
    pub steps_per_unit: u64,
}

const fn verb(name: &'static str, route: &'static str, summary: &'static str) -> Verb {
    Verb {
        name,
        route: Some(route),
        summary,
        result: None,
        units: None,
        steps_per_unit: 1,
    }
}

impl Verb {
    const fn result(self, class: &'static str) -> Verb {
        Verb {
            result: Some(class),
            ..self
        }
    }
    const fn sharded(self, units: &'static str, steps_per_unit: u64) -> Verb {
        Verb {
            units: Some(units),
            steps_per_unit,
            ..self
        }
    }
}

/// Every verb, in the order front ends list them.
pub const VERBS: &[Verb] = &[
    verb(
        "fit",
        "fit",
        "Maximum-likelihood fit with uncertainties and correlations",
    )
    .result("FitResult"),
    verb(
        "hypotest",
        "hypotest",
        "Asymptotic CLs at a POI value (pyhf cls)",
    )
    .result("AsymptoticHypotestResult"),
    verb(
        "hypotest_toys",
        "hypotest-toys",
        "Toy-based CLs at a POI value (pyhf's calctype=\"toybased\")",
    )
    .result("ToyHypotestResult")
    .sharded("toys", 2),
    verb(
        "upper_limit",
        "upper-limit",
        "Observed and expected upper limits on the POI at a CLs level",
    )
    .result("UpperLimitResult")
    .sharded("μ values", 1),
    verb(
        "significance",
        "significance",
        "Discovery significance (asymptotic q0): p0 and Z, observed and expected",
    )
    .result("SignificanceResult"),
    verb(
        "profile_scan",
        "scan",
        "Profile-likelihood scan of the POI or any parameter",
    )
    .result("ProfileScanResult")
    .sharded("scan values", 1),
    verb(
        "ranking",
        "ranking",
        "Nuisance-parameter ranking: pulls, constraints and pre/post-fit impacts on the POI",
    )
    .result("RankingResult")
    .sharded("ranked parameters", 4),
    verb("gof", "gof", "Goodness of fit against the saturated model").result("GofResult"),
    verb(
        "posterior",
        "posterior",
        "Bayesian posterior by NUTS: credible upper limit and interval on the POI, R̂ and ESS",
    )
    .result("PosteriorResult")
    .sharded("chains", 1),
    verb(
        "eval",
        "eval",
        "Evaluate twice_nll, the NLL gradient and the expected data at parameter points",
    ),
    Verb {
        name: "fit_toys",
        route: None,
        summary: "Toys drawn at a point, each fitted, in one batch",
        result: None,
        units: None,
        steps_per_unit: 1,
    },
    Verb {
        name: "fit_datasets",
        route: None,
        summary: "Given datasets, each fitted, in one batch",
        result: None,
        units: None,
        steps_per_unit: 1,
    },
];

/// The descriptor of the verb named `name` (the call's `request.verb`).
pub fn named(name: &str) -> Option<&'static Verb> {
    VERBS.iter().find(|v| v.name == name)
}

/// The descriptor of the verb routed at `route` (a CLI subcommand, a server path).
pub fn routed(route: &str) -> Option<&'static Verb> {
    VERBS.iter().find(|v| v.route == Some(route))
}

/// The summary of the verb routed at `route` (empty for a route no verb has: a test holds
/// every front end's routes to the registry).
pub fn summary(route: &str) -> &'static str {
    routed(route).map_or("", |v| v.summary)
}

/// The routes, in order (for messages and listings).
pub fn routes() -> impl Iterator<Item = &'static str> {
    VERBS.iter().filter_map(|v| v.route)
}

impl Request {
    /// What a shard of this request splits into, in words, and the progress steps per unit:
    /// the verb's, except for a toy-based limit, whose units are toys (each μ's, μ after μ), each
    /// two fitted ensembles' worth as a toy hypotest's.
    pub fn shard_unit(&self) -> (&'static str, u64) {
        match self {
            Request::UpperLimit {
                n_toys: Some(_), ..
            } => ("toys (over the scan's μ values)", 2),
            // A chain counts its iterations.
            Request::Posterior { warmup, draws, .. } => {
                ("chains", warmup.saturating_add(*draws) as u64)
            }
            _ => {
                let verb = self.verb();
                (verb.units.unwrap_or("units"), verb.steps_per_unit)
            }
        }
    }

    /// This request's verb.
    pub fn verb(&self) -> &'static Verb {
        let name = match self {
            Request::Eval { .. } => "eval",
            Request::Fit { .. } => "fit",
            Request::Hypotest { .. } => "hypotest",
            Request::HypotestToys { .. } => "hypotest_toys",
            Request::UpperLimit { .. } => "upper_limit",
            Request::Significance => "significance",
            Request::ProfileScan { .. } => "profile_scan",
            Request::Ranking => "ranking",
            Request::Gof => "gof",
            Request::Posterior { .. } => "posterior",
            Request::FitToys { .. } => "fit_toys",
            Request::FitDatasets { .. } => "fit_datasets",
        };
        named(name).unwrap_or(&VERBS[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_has_one_descriptor_under_its_json_name() {
        for descriptor in VERBS {
            assert_eq!(
                VERBS.iter().filter(|v| v.name == descriptor.name).count(),
                1,
                "{} is listed twice",
                descriptor.name
            );
            if let Some(route) = descriptor.route {
                assert_eq!(routed(route).map(|v| v.name), Some(descriptor.name));
            }
            // The request of that name, with its defaults where it has fields.
            let request: Request = serde_json::from_value(match descriptor.name {
                "hypotest" => serde_json::json!({"verb": "hypotest", "mu": 1.0}),
                "hypotest_toys" => {
                    serde_json::json!({"verb": "hypotest_toys", "mu": 1.0, "n_toys": 1})
                }
                "fit_toys" => serde_json::json!({"verb": "fit_toys", "pars": [1.0], "n_toys": 1}),
                "fit_datasets" => serde_json::json!({"verb": "fit_datasets", "datasets": [[1.0]]}),
                "profile_scan" => serde_json::json!({"verb": "profile_scan", "values": [1.0]}),
                name => serde_json::json!({"verb": name}),
            })
            .unwrap_or_else(|e| panic!("{}: {e}", descriptor.name));
            assert_eq!(request.verb().name, descriptor.name);
            assert_eq!(
                serde_json::to_value(&request).unwrap()["verb"],
                descriptor.name
            );
        }
    }
}
