//! HS3 documents of arbitrary *structure* from bytes: distributions and functions that name
//! each other (cycles, self-references, nodes shared by many parents, long chains), parameter
//! points with repeated or malformed entries. Shared by the property test (`tests/structure.rs`) and
//! the fuzz target `hs3_structure` (included there by path), so both explore one family.

use serde_json::{Value, json};

/// Bytes read one at a time; zeros once they run out.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn next(&mut self) -> usize {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b as usize
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// An HS3 document built from `data`: up to 12 distributions over one observable `x` and up
/// to 12 functions, each naming others chosen by the bytes, a chain of up to 2000 functions,
/// and a parameter point of four parameters with their quirks.
pub fn document(data: &[u8]) -> Value {
    let mut b = Bytes { data, at: 0 };
    let n_dist = 1 + b.below(12);
    let n_func = b.below(12);
    let chain = if b.below(4) == 0 { b.next() * 8 } else { 0 };
    let params = ["p0", "p1", "p2", "p3"];
    let value = |b: &mut Bytes| -> Value {
        match b.below(4) {
            0 => json!(0.5 + b.below(8) as f64),
            1 if n_func > 0 => json!(format!("f{}", b.below(n_func))),
            2 if chain > 0 => json!("c0"),
            _ => json!(params[b.below(4)]),
        }
    };
    let mut distributions = Vec::new();
    for i in 0..n_dist {
        let name = format!("d{i}");
        let children: Vec<String> = (0..1 + b.below(3))
            .map(|_| format!("d{}", b.below(n_dist)))
            .collect();
        distributions.push(match b.below(4) {
            0 => json!({"name": name, "type": "mixture_dist", "summands": children,
                        "coefficients": (0..children.len().saturating_sub(b.below(2))).map(|_| value(&mut b)).collect::<Vec<_>>()}),
            1 => json!({"name": name, "type": "product_dist", "factors": children}),
            2 => json!({"name": name, "type": "exponential_dist", "x": "x", "c": value(&mut b)}),
            _ => json!({"name": name, "type": "gaussian_dist", "x": "x", "mean": value(&mut b), "sigma": value(&mut b)}),
        });
    }
    let mut functions = Vec::new();
    for i in 0..n_func {
        let name = format!("f{i}");
        let refs: Vec<Value> = (0..1 + b.below(4)).map(|_| value(&mut b)).collect();
        functions.push(match b.below(3) {
            0 => json!({"name": name, "type": "sum", "summands": refs}),
            1 => json!({"name": name, "type": "product", "factors": refs}),
            _ => {
                let terms: Vec<String> = refs
                    .iter()
                    .map(|r| r.as_str().map_or(r.to_string(), String::from))
                    .collect();
                json!({"name": name, "type": "generic_function", "expression": terms.join(" + ")})
            }
        });
    }
    for k in 0..chain {
        let next = if k + 1 < chain {
            format!("c{}", k + 1)
        } else {
            "p0".into()
        };
        functions.push(json!({"name": format!("c{k}"), "type": "generic_function", "expression": format!("{next} * 1")}));
    }
    let mut point: Vec<Value> = params
        .iter()
        .map(|p| json!({"name": p, "value": 1.0, "min": 0.1, "max": 10}))
        .collect();
    match b.below(6) {
        0 => point.push(json!({"name": params[b.below(4)], "value": 2.0})),
        1 => point[b.below(4)]["value"] = json!("ten"),
        2 => point[b.below(4)]["min"] = json!("0"),
        _ => {}
    }
    json!({
        "metadata": {"hs3_version": "0.2"},
        "distributions": distributions,
        "functions": functions,
        "data": [{"name": "obs", "type": "unbinned", "axes": [{"name": "x", "min": 0.0, "max": 5.0}],
                  "entries": [[0.5], [1.5], [2.5], [4.5]]}],
        "likelihoods": [{"name": "L", "distributions": [format!("d{}", b.below(n_dist))], "data": ["obs"]}],
        "parameter_points": [{"name": "default_values", "parameters": point}],
    })
}
