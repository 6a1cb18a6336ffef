//! HistFactory XML with its ROOT files — what hist2workspace, TRExFitter and HistFitter read —
//! into a pyhf workspace (the canonical spec of binned formats), without ROOT.
//!
//! [`read`] with [`Semantics::Pyhf`] gives what pyhf 0.7.6's `pyhf.readxml.parse` gives, value
//! for value (integers of integer histograms included, so the digest is pyhf's). With
//! [`Semantics::Root`] (the default) it gives the model ROOT's `hist2workspace` builds: the
//! workspace then carries [`RootSemantics`] for what pyhf's JSON cannot say. Both term by term in
//! docs/histfactory-xml.md. Paths in the XML are relative to the base folder and may not leave
//! it; entity declarations are refused (no XML bombs, no external entities).

mod files;
mod functions;
mod numbers;

use std::path::{Path, PathBuf};

use ns_core::{Error, FileAccess, Result};
use ns_translate::model::root::{
    ConstraintTerm, ConstraintType, ROOT_SEMANTICS_KEY, RootSemantics, ShapeSysConfig,
    StatErrorConfig,
};
use rayon::prelude::*;
use serde_json::{Map, Value, json};

use files::Files;
pub use files::SentFiles;
use functions::Functions;
use numbers::{Num, histogram};

/// The most channels a combination may list (a bound far beyond real analyses).
pub const MAX_CHANNELS: usize = 5000;

/// The deepest element nesting read (HistFactory XML nests four deep; the XML parser recurses
/// on depth, so deeper documents are refused before it sees them).
pub const MAX_DEPTH: usize = 64;

/// Whose reading of the XML a model follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Semantics {
    /// ROOT's `hist2workspace`: the model RooFit fits.
    #[default]
    Root,
    /// pyhf's `readxml`: the workspace `pyhf xml2json` writes.
    Pyhf,
}

impl Semantics {
    pub fn name(self) -> &'static str {
        match self {
            Semantics::Root => "root",
            Semantics::Pyhf => "pyhf",
        }
    }

    pub fn from_name(name: &str) -> Result<Semantics> {
        match name {
            "root" => Ok(Semantics::Root),
            "pyhf" => Ok(Semantics::Pyhf),
            other => Err(Error::InvalidInput(format!(
                "semantics '{other}': HistFactory XML is read with 'root' (hist2workspace's \
                 model, the default) or 'pyhf' (pyhf.readxml's)"
            ))),
        }
    }
}

/// How a read is told where to look.
pub struct ReadOptions<'a> {
    /// Whose reading of the XML the model follows.
    pub semantics: Semantics,
    /// The folder the XML's paths start from; `None`: the top XML's folder or the nearest folder
    /// above it from which its first `<Input>` exists.
    pub base_dir: Option<&'a Path>,
    /// Which files on the disk may be opened (the server's policy opens none).
    pub access: FileAccess<'a>,
    /// The files sent with the XML (paths relative to the base folder, the top XML among them):
    /// read from here, never from the disk.
    pub sent: Option<&'a SentFiles>,
}

/// Whether the start of a file is a HistFactory combination XML.
pub fn claims_head(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let text = text.trim_start_matches('\u{feff}');
    // Comments and the XML declaration may come first.
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("<!--") {
            match after.find("-->") {
                Some(end) => rest = &after[end + 3..],
                None => return false,
            }
        } else if rest.starts_with("<?") {
            match rest.find("?>") {
                Some(end) => rest = &rest[end + 2..],
                None => return false,
            }
        } else {
            break;
        }
    }
    rest.starts_with("<!DOCTYPE Combination") || rest.starts_with("<Combination")
}

/// Parse XML text, refusing entity declarations.
fn document<'t>(text: &'t str, origin: &Path) -> Result<roxmltree::Document<'t>> {
    let at = origin.display();
    if text.contains("<!ENTITY") {
        return Err(Error::InvalidInput(format!(
            "{at}: the XML declares entities (<!ENTITY …>): they are not read — an entity can \
             expand without bound or name a file elsewhere; HistFactory XML needs none"
        )));
    }
    check_depth(text, origin)?;
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        nodes_limit: 4_000_000,
    };
    roxmltree::Document::parse_with_options(text, options)
        .map_err(|e| Error::InvalidInput(format!("{at}: not well-formed XML: {e}")))
}

/// Refuse elements nested deeper than [`MAX_DEPTH`]: a scan of the tags (comments, CDATA,
/// processing instructions, declarations and quoted attribute values skipped) that keeps only a
/// counter.
fn check_depth(text: &str, origin: &Path) -> Result<()> {
    let bytes = text.as_bytes();
    let skip_to = |from: usize, end: &str| {
        text[from..]
            .find(end)
            .map_or(bytes.len(), |k| from + k + end.len())
    };
    let (mut i, mut depth) = (0, 0usize);
    while let Some(k) = text[i..].find('<') {
        let at = i + k;
        let rest = &text[at..];
        i = if rest.starts_with("<!--") {
            skip_to(at, "-->")
        } else if rest.starts_with("<![CDATA[") {
            skip_to(at, "]]>")
        } else if rest.starts_with("<?") {
            skip_to(at, "?>")
        } else if rest.starts_with("<!") {
            // A declaration; an internal subset ends with "]>".
            let close = rest.find('>').unwrap_or(rest.len());
            match rest.find('[') {
                Some(open) if open < close => skip_to(at, "]>"),
                _ => at + close + 1,
            }
        } else if rest.starts_with("</") {
            depth = depth.saturating_sub(1);
            skip_to(at, ">")
        } else {
            // A start tag: its end is the first '>' outside quotes.
            let mut quote = None;
            let mut end = bytes.len();
            for (j, &b) in bytes.iter().enumerate().skip(at + 1) {
                match (quote, b) {
                    (Some(q), _) if b == q => quote = None,
                    (Some(_), _) => {}
                    (None, b'"' | b'\'') => quote = Some(b),
                    (None, b'>') => {
                        end = j;
                        break;
                    }
                    _ => {}
                }
            }
            if end < bytes.len() && bytes[end - 1] != b'/' {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Error::InvalidInput(format!(
                        "{}: elements nest deeper than {MAX_DEPTH} levels (HistFactory XML needs \
                         four)",
                        origin.display()
                    )));
                }
            }
            end.saturating_add(1)
        };
        if i >= bytes.len() {
            break;
        }
    }
    Ok(())
}

fn attr<'a>(node: roxmltree::Node<'a, '_>, name: &str, place: &str) -> Result<&'a str> {
    node.attribute(name).ok_or_else(|| {
        Error::InvalidInput(format!(
            "{place}: <{}> has no {name}=\"…\"",
            node.tag_name().name()
        ))
    })
}

/// Python's `float()` of an attribute (surrounding blanks allowed).
fn float(node: roxmltree::Node, name: &str, place: &str) -> Result<f64> {
    let text = attr(node, name, place)?;
    // Rust's parse takes what Python's float() takes (signs, ".5", "1.", exponents, "inf",
    // "nan"); a workspace holds finite numbers only, so the XML is refused where one is not.
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        parsed => Err(Error::InvalidInput(format!(
            "{place}: <{} {name}=\"{text}\"> is not {}",
            node.tag_name().name(),
            if parsed.is_ok() {
                "a finite number"
            } else {
                "a number"
            }
        ))),
    }
}

/// The folder the XML's paths start from.
fn base_dir(top: &Path, first_input: Option<&str>) -> PathBuf {
    let folder = top
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Some(input) = first_input else {
        return folder.to_path_buf();
    };
    folder
        .ancestors()
        .find(|dir| dir.join(input.trim()).is_file())
        .unwrap_or(folder)
        .to_path_buf()
}

/// The pyhf workspace of the combination XML `top`, as pyhf's `readxml.parse` gives it.
pub fn read(top: &Path, options: &ReadOptions) -> Result<Value> {
    let top_name = top.display().to_string();
    let text = match options.sent {
        Some(_) => {
            let base = options.base_dir.unwrap_or(Path::new(""));
            Files::new(base.to_path_buf(), FileAccess::Denied, options.sent)
                .xml(&top_name, "the combination XML")?
                .1
        }
        None => {
            options.access.resolve(&top_name)?;
            ns_translate::load::read_text(top)?
        }
    };
    let doc = document(&text, top)?;
    let root = doc.root_element();
    if root.tag_name().name() != "Combination" {
        return Err(Error::InvalidInput(format!(
            "{top_name}: the top-level element is <{}>; a HistFactory combination XML has \
             <Combination>",
            root.tag_name().name()
        )));
    }
    let inputs: Vec<&str> = root
        .children()
        .filter(|n| n.has_tag_name("Input"))
        .filter_map(|n| n.text())
        .filter(|t| !t.trim().is_empty())
        .collect();
    if inputs.len() > MAX_CHANNELS {
        return Err(Error::InvalidInput(format!(
            "{top_name}: {} <Input> channels; a combination reads at most {MAX_CHANNELS}",
            inputs.len()
        )));
    }
    let base = match (options.base_dir, options.sent) {
        (Some(b), _) => b.to_path_buf(),
        (None, Some(_)) => PathBuf::new(),
        (None, None) => base_dir(top, inputs.first().copied()),
    };
    let files = Files::new(base, options.access, options.sent);
    // pyhf ignores a combination's functions.
    let functions = match options.semantics {
        Semantics::Root => Functions::read(root, &top_name)?,
        Semantics::Pyhf => Functions::default(),
    };
    let mut reader = Reader::new(options.semantics, &functions);
    // The channels are read in parallel, each into its own reader, merged in input order (the
    // first error in that order is the one reported).
    let read_channel = |input: &&str| -> Result<(Value, Value, Vec<Config>, Reader)> {
        let mut local = Reader::new(options.semantics, &functions);
        let (path, text) = files.xml(input, &format!("{top_name}: <Input>"))?;
        let channel_doc = document(&text, &path)?;
        let (channel, observation, configs) =
            local.channel(channel_doc.root_element(), &path, &files)?;
        Ok((channel, observation, configs, local))
    };
    let read: Vec<_> = inputs.par_iter().map(read_channel).collect();
    let mut channels = Vec::new();
    let mut observations = Vec::new();
    let mut configs: Vec<Config> = Vec::new();
    for result in read {
        let (channel, observation, channel_configs, local) = result?;
        channels.push(channel);
        observations.push(observation);
        configs.extend(channel_configs);
        reader.merge(local);
    }
    // A function's dependents are created first in ROOT: their ranges win over a NormFactor's.
    let dependents: Vec<Config> = reader
        .functions
        .dependents
        .iter()
        .filter(|d| {
            reader
                .function_parameters
                .iter()
                .any(|p| d["name"] == p.as_str())
        })
        .cloned()
        .collect();
    configs.retain(|c| !dependents.iter().any(|d| d["name"] == c["name"]));
    configs.extend(dependents);
    let configs = dedupe(configs)?;
    let measurements = root
        .children()
        .filter(|n| n.has_tag_name("Measurement"))
        .map(|m| reader.measurement(m, &configs, &top_name))
        .collect::<Result<Vec<_>>>()?;
    let mut workspace = object([
        ("measurements", Value::Array(measurements)),
        ("channels", Value::Array(channels)),
        ("observations", Value::Array(observations)),
        ("version", "1.0.0".into()),
    ]);
    if reader.semantics == Semantics::Root {
        workspace[ROOT_SEMANTICS_KEY] = serde_json::to_value(&reader.root)
            .map_err(|e| Error::Computation(format!("ROOT semantics as JSON: {e}")))?;
    }
    Ok(workspace)
}

/// One read's semantics, and what ROOT's semantics collect on the way.
struct Reader<'f> {
    semantics: Semantics,
    root: RootSemantics,
    /// The combination's `<Function>`s (ROOT's semantics).
    functions: &'f Functions,
    /// The dependents of functions that some sample's NormFactors read.
    function_parameters: Vec<String>,
}

/// A measurement's number as ROOT reads it: `std::stof`, a float32 widened back (0.1 →
/// 0.10000000149011612); pyhf's as Python's `float()`.
fn measurement_float(
    node: roxmltree::Node,
    name: &str,
    place: &str,
    semantics: Semantics,
) -> Result<f64> {
    let value = float(node, name, place)?;
    Ok(match semantics {
        Semantics::Root => f64::from(value as f32),
        Semantics::Pyhf => value,
    })
}

/// A parameter's configuration in a measurement (`name`, `bounds`, `inits`, `fixed`).
type Config = Map<String, Value>;

/// The workspace of the combination XML `top` read from local files with `semantics` —
/// pyhf's: what `pyhf xml2json` prints and `pyhf.readxml.parse` returns — validated as a
/// workspace.
pub fn workspace_of_files(
    top: &Path,
    base_dir: Option<&Path>,
    semantics: Semantics,
) -> Result<Value> {
    let options = ReadOptions {
        semantics,
        base_dir,
        access: FileAccess::Local { base: base_dir },
        sent: None,
    };
    let workspace = read(top, &options)?;
    ns_translate::Workspace::from_value(workspace.clone())?;
    Ok(workspace)
}

impl<'f> Reader<'f> {
    fn new(semantics: Semantics, functions: &'f Functions) -> Self {
        Reader {
            semantics,
            root: RootSemantics::default(),
            functions,
            function_parameters: Vec::new(),
        }
    }

    /// What a channel's reader collected, added after the channels before it (a ShapeSys of
    /// one name in two channels keeps the later one's configuration, as a sequential read does).
    fn merge(&mut self, channel: Reader) {
        self.root.staterror.extend(channel.root.staterror);
        self.root.shapesys.extend(channel.root.shapesys);
        self.function_parameters.extend(channel.function_parameters);
    }

    /// One channel: its entry of `channels`, its observation, its NormFactors' parameter
    /// configs.
    fn channel(
        &mut self,
        node: roxmltree::Node,
        path: &Path,
        files: &Files,
    ) -> Result<(Value, Value, Vec<Config>)> {
        let at = path.display().to_string();
        if node.tag_name().name() != "Channel" {
            return Err(Error::InvalidInput(format!(
                "{at}: the top-level element is <{}>; a channel XML has <Channel>",
                node.tag_name().name()
            )));
        }
        let name = attr(node, "Name", &at)?;
        let place = format!("{at}, channel '{name}'");
        let input_file = node.attribute("InputFile").unwrap_or("");
        let histo_path = node.attribute("HistoPath").unwrap_or("");
        let data = node
            .children()
            .find(|n| n.has_tag_name("Data"))
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "{place}: no <Data>; a channel needs its observed histogram"
                ))
            })?;
        let data_file = data.attribute("InputFile").unwrap_or(input_file);
        let data_name = data.attribute("HistoName").unwrap_or("");
        if data_file.is_empty() || data_name.is_empty() {
            return Err(Error::InvalidInput(format!(
                "{place}: <Data> names no histogram (InputFile and HistoName); a channel needs \
                 its observed data"
            )));
        }
        let data_path = data.attribute("HistoPath").unwrap_or(histo_path);
        let observed = histogram(
            files,
            data_file,
            data_path,
            data_name,
            &format!("{place}, <Data>"),
            self.semantics,
        )?;
        if self.semantics == Semantics::Root {
            self.stat_error_config(node, name, &place)?;
        }
        let mut samples = Vec::new();
        let mut configs = Vec::new();
        for sample in node.children().filter(|n| n.has_tag_name("Sample")) {
            let (entry, sample_configs) =
                self.sample(sample, name, input_file, histo_path, &place, files)?;
            samples.push(entry);
            configs.extend(sample_configs);
        }
        Ok((
            object([("name", name.into()), ("samples", Value::Array(samples))]),
            object([
                ("name", name.into()),
                ("data", numbers::array(observed.values)),
            ]),
            configs,
        ))
    }

    /// ROOT's reading of a channel's `<StatErrorConfig>` (Poisson and threshold 0.05 where an
    /// attribute or the element is absent).
    fn stat_error_config(
        &mut self,
        node: roxmltree::Node,
        channel: &str,
        place: &str,
    ) -> Result<()> {
        let mut config = StatErrorConfig::default();
        if let Some(element) = node.children().find(|n| n.has_tag_name("StatErrorConfig")) {
            let here = format!("{place}, <StatErrorConfig>");
            if element.attribute("RelErrorThreshold").is_some() {
                config.threshold = float(element, "RelErrorThreshold", &here)?;
            }
            if let Some(kind) = element.attribute("ConstraintType") {
                config.constraint = constraint_type(kind, &here)?;
            }
        }
        self.root
            .staterror
            .insert(format!("staterror_{channel}"), config);
        Ok(())
    }

    /// One sample: its entry (name, data, modifiers) and its NormFactors' parameter configs.
    fn sample(
        &mut self,
        node: roxmltree::Node,
        channel: &str,
        input_file: &str,
        histo_path: &str,
        channel_place: &str,
        files: &Files,
    ) -> Result<(Value, Vec<Config>)> {
        let root = self.semantics == Semantics::Root;
        let name = attr(node, "Name", channel_place)?;
        let place = format!("{channel_place}, sample '{name}'");
        let input_file = node.attribute("InputFile").unwrap_or(input_file);
        let histo_path = node.attribute("HistoPath").unwrap_or(histo_path);
        // ROOT's systematics inherit the sample's (and so the channel's) HistoPath; pyhf's do not.
        let inherited_path = if root { histo_path } else { "" };
        let histo_name = attr(node, "HistoName", &place)?;
        let nominal = histogram(
            files,
            input_file,
            histo_path,
            histo_name,
            &place,
            self.semantics,
        )?;
        let mut modifiers = Vec::new();
        let mut configs = Vec::new();
        // With functions, the NormFactors are multiplied out after the loop.
        let mut function_normfactors = Vec::new();
        // ROOT 6.40 scales every sample by the Lumi parameter, NormalizeByTheory="False" ones
        // included (it reuses the one Lumi variable); pyhf only those declared "True".
        if root || node.attribute("NormalizeByTheory") == Some("True") {
            modifiers.push(json!({"name": "lumi", "type": "lumi", "data": null}));
        }
        // pyhf reads every element below the sample, in document order.
        for tag in node.descendants().skip(1).filter(|n| n.is_element()) {
            let kind = tag.tag_name().name();
            let here = format!("{place}, <{kind}>");
            match kind {
                "OverallSys" => modifiers.push(json!({
                    "name": attr(tag, "Name", &here)?,
                    "type": "normsys",
                    "data": {"lo": float(tag, "Low", &here)?, "hi": float(tag, "High", &here)?},
                })),
                "NormFactor"
                    if self
                        .functions
                        .by_name
                        .contains_key(attr(tag, "Name", &here)?) =>
                {
                    // Its Val, Low and High are not read: the function's dependents are the
                    // parameters.
                    function_normfactors.push(attr(tag, "Name", &here)?);
                }
                "NormFactor" => {
                    let parameter = attr(tag, "Name", &here)?;
                    if self.functions.is_empty() {
                        modifiers
                            .push(json!({"name": parameter, "type": "normfactor", "data": null}));
                    } else {
                        function_normfactors.push(parameter);
                    }
                    let mut config = Map::new();
                    config.insert("name".into(), json!(parameter));
                    config.insert(
                        "bounds".into(),
                        json!([[float(tag, "Low", &here)?, float(tag, "High", &here)?]]),
                    );
                    config.insert("inits".into(), json!([float(tag, "Val", &here)?]));
                    if let Some(constant) = tag.attribute("Const").filter(|c| !c.is_empty()) {
                        config.insert("fixed".into(), json!(constant == "True"));
                    }
                    configs.push(config);
                }
                "HistoSys" => {
                    let side = |which: &str| -> Result<Vec<Num>> {
                        let file = tag
                            .attribute(format!("HistoFile{which}").as_str())
                            .unwrap_or(input_file);
                        let path = tag
                            .attribute(format!("HistoPath{which}").as_str())
                            .unwrap_or(inherited_path);
                        let histo = attr(tag, &format!("HistoName{which}"), &here)?;
                        Ok(histogram(files, file, path, histo, &here, self.semantics)?.values)
                    };
                    let (lo, hi) = (side("Low")?, side("High")?);
                    let data = object([
                        ("lo_data", numbers::array(lo)),
                        ("hi_data", numbers::array(hi)),
                    ]);
                    modifiers.push(modifier(attr(tag, "Name", &here)?, "histosys", data));
                }
                "StatError" if attr(tag, "Activate", &here)? == "True" => {
                    let data = match tag.attribute("HistoName").unwrap_or("") {
                        "" => nominal.errors.clone(),
                        histo => {
                            // ROOT names the file InputFile, pyhf HistoFile.
                            let file_attribute = if root { "InputFile" } else { "HistoFile" };
                            let file = tag.attribute(file_attribute).unwrap_or(input_file);
                            let path = tag.attribute("HistoPath").unwrap_or(inherited_path);
                            let relative =
                                histogram(files, file, path, histo, &here, self.semantics)?.values;
                            numbers::product(&relative, &nominal.values, &here)?
                        }
                    };
                    if data.is_empty() {
                        return Err(Error::InvalidInput(format!(
                            "{here}: no statistical errors"
                        )));
                    }
                    let name = format!("staterror_{channel}");
                    modifiers.push(modifier(&name, "staterror", numbers::array(data)));
                }
                "ShapeSys" => {
                    let file = tag.attribute("InputFile").unwrap_or(input_file);
                    let path = tag.attribute("HistoPath").unwrap_or(inherited_path);
                    let histo = attr(tag, "HistoName", &here)?;
                    let relative =
                        histogram(files, file, path, histo, &here, self.semantics)?.values;
                    let modifier = attr(tag, "Name", &here)?;
                    if root {
                        let kind = tag.attribute("ConstraintType").unwrap_or("Gaussian");
                        let config = ShapeSysConfig {
                            constraint: constraint_type(kind, &here)?,
                            // ROOT keeps a ShapeSys's relative widths in single precision.
                            relative: numbers::floats(&relative)
                                .into_iter()
                                .map(|v| f64::from(v as f32))
                                .collect(),
                        };
                        self.root.shapesys.insert(modifier.to_string(), config);
                    }
                    let data = numbers::product(&nominal.values, &relative, &here)?;
                    modifiers.push(self::modifier(modifier, "shapesys", numbers::array(data)));
                }
                "ShapeFactor" => modifiers.push(json!({
                    "name": attr(tag, "Name", &here)?,
                    "type": "shapefactor",
                    "data": null,
                })),
                // Elements pyhf does not read (StatErrorConfig's siblings, an inactive StatError).
                _ => {}
            }
        }
        if !function_normfactors.is_empty() {
            let (parameters, constant) =
                functions::sample_normfactors(&function_normfactors, self.functions, &place)?;
            for parameter in parameters {
                if !function_normfactors.contains(&parameter.as_str()) {
                    self.function_parameters.push(parameter.clone());
                }
                modifiers.push(modifier(&parameter, "normfactor", Value::Null));
            }
            if constant != 1.0 {
                // A fixed normfactor holds the functions' constant factor.
                let parameter = format!("{channel}_{name}_function_constant");
                modifiers.push(modifier(&parameter, "normfactor", Value::Null));
                let mut config = Map::new();
                config.insert("name".into(), json!(parameter));
                config.insert("bounds".into(), json!([[constant, constant]]));
                config.insert("inits".into(), json!([constant]));
                config.insert("fixed".into(), json!(true));
                configs.push(config);
            }
        }
        Ok((
            object([
                ("name", name.into()),
                ("data", numbers::array(nominal.values)),
                ("modifiers", Value::Array(modifiers)),
            ]),
            configs,
        ))
    }

    /// One measurement: the lumi parameter, then the NormFactors' configs with the
    /// ParamSettings applied (a setting moves its parameter to the end, as pyhf's dictionary
    /// does); with ROOT's semantics its ConstraintTerms too.
    fn measurement(
        &mut self,
        node: roxmltree::Node,
        configs: &[Config],
        top: &str,
    ) -> Result<Value> {
        let name = attr(node, "Name", top)?;
        let place = format!("{top}, measurement '{name}'");
        let lumi = measurement_float(node, "Lumi", &place, self.semantics)?;
        let sigma = lumi * measurement_float(node, "LumiRelErr", &place, self.semantics)?;
        let poi = node
            .children()
            .find(|n| n.has_tag_name("POI"))
            .ok_or_else(|| Error::InvalidInput(format!("{place}: no <POI>")))?
            .text()
            .unwrap_or("")
            .trim();
        // ROOT's Lumi ranges over [0, 10·Lumi]; pyhf's readxml sets ±5σ.
        let lumi_bounds = match self.semantics {
            Semantics::Root => [0.0, 10.0 * lumi],
            Semantics::Pyhf => [lumi - 5.0 * sigma, lumi + 5.0 * sigma],
        };
        let mut lumi_config = Map::new();
        lumi_config.insert("name".into(), json!("lumi"));
        lumi_config.insert("auxdata".into(), json!([lumi]));
        lumi_config.insert("bounds".into(), json!([lumi_bounds]));
        lumi_config.insert("inits".into(), json!([lumi]));
        lumi_config.insert("sigmas".into(), json!([sigma]));
        let mut others: Vec<Config> = configs.to_vec();
        for setting in node.children().filter(|n| n.has_tag_name("ParamSetting")) {
            let here = format!("{place}, <ParamSetting>");
            let mut update = Map::new();
            if let Some(constant) = setting.attribute("Const").filter(|c| !c.is_empty()) {
                update.insert("fixed".into(), json!(constant == "True"));
            }
            if setting.attribute("Val").is_some_and(|v| !v.is_empty()) {
                update.insert("inits".into(), json!([float(setting, "Val", &here)?]));
            }
            let Some(text) = setting.text() else { continue };
            // pyhf splits on single spaces.
            for rootname in text.trim().split(' ') {
                let parameter = parameter_name(rootname, &here)?;
                if parameter == "lumi" {
                    lumi_config.extend(update.clone());
                    continue;
                }
                let mut config = match others.iter().position(|c| c["name"] == parameter.as_str()) {
                    Some(i) => others.remove(i),
                    None => {
                        let mut fresh = Map::new();
                        fresh.insert("name".into(), json!(parameter));
                        fresh
                    }
                };
                config.extend(update.clone());
                others.push(config);
            }
        }
        if self.semantics == Semantics::Root {
            self.constraint_terms(node, name, &place)?;
        }
        let mut parameters = vec![Value::Object(lumi_config)];
        parameters.extend(others.into_iter().map(Value::Object));
        let config = object([
            ("poi", poi.into()),
            ("parameters", Value::Array(parameters)),
        ]);
        Ok(object([("name", name.into()), ("config", config)]))
    }

    /// A measurement's `<ConstraintTerm Type RelativeUncertainty>alpha names</ConstraintTerm>`s.
    fn constraint_terms(
        &mut self,
        node: roxmltree::Node,
        measurement: &str,
        place: &str,
    ) -> Result<()> {
        for element in node.children().filter(|n| n.has_tag_name("ConstraintTerm")) {
            let here = format!("{place}, <ConstraintTerm>");
            let relative =
                || measurement_float(element, "RelativeUncertainty", &here, Semantics::Root);
            let term = match attr(element, "Type", &here)? {
                "Gamma" => ConstraintTerm::Gamma {
                    relative_uncertainty: relative()?,
                },
                "LogNormal" => ConstraintTerm::LogNormal {
                    relative_uncertainty: relative()?,
                },
                "Uniform" => ConstraintTerm::Uniform,
                "NoConstraint" => ConstraintTerm::NoConstraint,
                other => {
                    return Err(Error::InvalidInput(format!(
                        "{here}: Type=\"{other}\" is not a ConstraintTerm (Gamma, LogNormal, \
                         Uniform or NoConstraint)"
                    )));
                }
            };
            for rootname in element.text().unwrap_or("").split_whitespace() {
                let parameter = rootname.strip_prefix("alpha_").unwrap_or(rootname);
                self.root
                    .constraint_terms
                    .entry(measurement.to_string())
                    .or_default()
                    .insert(parameter.to_string(), term);
            }
        }
        Ok(())
    }
}

/// A JSON object of owned values (`json!` would copy each value through serde).
fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Object(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// A pyhf modifier.
fn modifier(name: &str, kind: &str, data: Value) -> Value {
    object([("name", name.into()), ("type", kind.into()), ("data", data)])
}

/// A `ConstraintType` attribute (`Gaussian`, `Poisson` or its short `Pois`).
fn constraint_type(text: &str, place: &str) -> Result<ConstraintType> {
    match text {
        "Gaussian" | "Gauss" => Ok(ConstraintType::Gaussian),
        "Poisson" | "Pois" => Ok(ConstraintType::Poisson),
        other => Err(Error::InvalidInput(format!(
            "{place}: ConstraintType=\"{other}\" is neither Gaussian nor Poisson"
        ))),
    }
}

/// Parameter configs given once per name; two different configs of one name are an error.
fn dedupe(configs: Vec<Config>) -> Result<Vec<Config>> {
    let mut unique: Vec<Config> = Vec::new();
    for config in configs {
        match unique.iter().find(|u| u["name"] == config["name"]) {
            Some(first) if *first != config => {
                return Err(Error::InvalidInput(format!(
                    "the NormFactor {} is configured twice, differently ({} and {}): give it one \
                     Val, Low, High and Const",
                    config["name"],
                    Value::Object(first.clone()),
                    Value::Object(config.clone())
                )));
            }
            Some(_) => {}
            None => unique.push(config),
        }
    }
    Ok(unique)
}

/// pyhf's name of a ROOT parameter named in a ParamSetting (`alpha_x` → `x`, `Lumi` → `lumi`).
fn parameter_name(rootname: &str, place: &str) -> Result<String> {
    if rootname.starts_with("gamma_") {
        return Err(Error::InvalidInput(format!(
            "{place}: '{rootname}' is one bin of a vector of parameters (a gamma): pyhf's \
             semantics cannot set those constant"
        )));
    }
    Ok(match rootname {
        "Lumi" => "lumi".to_string(),
        other => other
            .strip_prefix("alpha_")
            .filter(|n| !n.is_empty())
            .unwrap_or(other)
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_are_read_as_pythons_float_reads_them() {
        let doc = roxmltree::Document::parse(
            r#"<r a=" 1.05 " b=".95" c="1." d="-Infinity" e="+inf" f="NaN" g="1e-3" h="1,05" i=""/>"#,
        )
        .unwrap();
        let node = doc.root_element();
        let value = |name| super::float(node, name, "here");
        assert_eq!(value("a").unwrap(), 1.05);
        assert_eq!(value("b").unwrap(), 0.95);
        assert_eq!(value("c").unwrap(), 1.0);
        for (name, text) in [("d", "-Infinity"), ("e", "+inf"), ("f", "NaN")] {
            let message = value(name).unwrap_err().to_string();
            assert!(
                message.contains(&format!("<r {name}=\"{text}\"> is not a finite number")),
                "{message}"
            );
        }
        assert_eq!(value("g").unwrap(), 1e-3);
        assert!(
            value("h")
                .unwrap_err()
                .to_string()
                .contains("<r h=\"1,05\"> is not a number")
        );
        assert!(value("i").is_err());
    }
}
