use ns_translate::FromWorkspace;
use ns_translate::{HistFactoryModel, ModelOptions, Workspace};
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).unwrap();
    for _ in 0..3 {
        let t0 = std::time::Instant::now();
        let text = std::fs::read_to_string(&path)?;
        let t1 = std::time::Instant::now();
        let v: serde_json::Value = serde_json::from_str(&text)?;
        let t2 = std::time::Instant::now();
        let ws = Workspace::from_value(v)?;
        let t3 = std::time::Instant::now();
        let model = HistFactoryModel::from_workspace(&ws, &ModelOptions::default())?;
        let t4 = std::time::Instant::now();
        let direct: Result<ns_translate::spec::Workspace, _> = serde_json::from_str(&text);
        let t5 = std::time::Instant::now();
        println!("read {:?} parse {:?} typed {:?} model {:?} direct {:?} {}", t1-t0, t2-t1, t3-t2, t4-t3, t5-t4, direct.is_ok() && model.n_params() > 0);
    }
    Ok(())
}
