//! `GET /v1/openapi.json`: the OpenAPI 3.1 document, its request schemas generated from the
//! engine's types (`schemars`: the call, the model reference), so it cannot drift from what
//! the server parses.

use axum::Json;
use ns_api::call::Call;
use ns_source::ModelRef;
use serde_json::{Value, json};

use ns_api::verbs;

fn error_responses() -> Value {
    let e = json!({"description": "an error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    json!({"400": e, "401": e, "404": e, "413": e, "422": e, "429": e, "503": e, "504": e})
}

fn json_body(schema: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn answer(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"type": "object"}}}})
}

fn with_errors(mut responses: Value) -> Value {
    if let (Some(r), Some(e)) = (responses.as_object_mut(), error_responses().as_object()) {
        for (k, v) in e {
            r.entry(k.clone()).or_insert(v.clone());
        }
    }
    responses
}

/// The document.
pub fn build() -> Value {
    let mut schemas = serde_json::Map::new();
    let mut absorb = |name: &str, schema: schemars::Schema| {
        let mut v = schema.to_value();
        // Definitions move to components; references follow them.
        if let Some(defs) = v.as_object_mut().and_then(|o| o.remove("$defs"))
            && let Some(defs) = defs.as_object()
        {
            for (k, d) in defs {
                schemas.insert(k.clone(), d.clone());
            }
        }
        schemas.insert(name.into(), v);
    };
    absorb("Call", schemars::schema_for!(Call));
    absorb("ModelRef", schemars::schema_for!(ModelRef));
    let text = Value::Object(schemas)
        .to_string()
        .replace("#/$defs/", "#/components/schemas/");
    let mut schemas: serde_json::Map<String, Value> =
        serde_json::from_str(&text).unwrap_or_default();
    // The call with the model inline or by id (the engine's call forbids unknown keys, so
    // these are copies of its schema, not extensions of it).
    let call = schemas.get("Call").cloned().unwrap_or_else(|| json!({}));
    let mut verb_call = call.clone();
    verb_call["description"] =
        json!("A call as the engine takes it, with the model inline or by id.");
    verb_call["properties"]["model"] = json!({"oneOf": [{"$ref": "#/components/schemas/ModelRef"},
        {"type": "object", "required": ["id"], "additionalProperties": false, "properties": {"id": {"type": "string"}}}]});
    verb_call["required"] = json!(["model", "request"]);
    let mut job = verb_call.clone();
    job["properties"]["verb"] =
        json!({"type": "string", "enum": verbs::routes().collect::<Vec<_>>()});
    job["required"] = json!(["model", "request", "verb"]);
    schemas.insert("VerbCall".into(), verb_call);
    schemas.insert("Job".into(), job);
    schemas.insert(
        "Error".into(),
        json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "object",
               "required": ["kind", "message"], "properties": {"kind": {"type": "string"}, "message": {"type": "string"}}}}}),
    );
    let mut paths = serde_json::Map::new();
    for verb in verbs::VERBS {
        let Some(path) = verb.route else { continue };
        paths.insert(
            format!("/v1/{path}"),
            json!({"post": {"summary": verb.summary, "operationId": verb.name,
                            "requestBody": json_body("VerbCall"),
                            "responses": with_errors(json!({"200": answer("the result, as the CLI prints it")}))}}),
        );
    }
    let id = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
    paths.insert("/v1/models".into(), json!({"post": {"summary": "Upload a model (inline); answers its id", "operationId": "upload_model",
        "requestBody": json_body("ModelRef"), "responses": with_errors(json!({"201": answer("the model's id, kind and parameters")}))}}));
    paths.insert("/v1/models/{id}".into(), json!({
        "get": {"operationId": "get_model", "parameters": id, "responses": with_errors(json!({"200": answer("the model")}))},
        "delete": {"operationId": "delete_model", "parameters": id, "responses": with_errors(json!({"204": {"description": "deleted"}}))}}));
    paths.insert("/v1/jobs".into(), json!({"post": {"summary": "Start a verb in the background", "operationId": "submit_job",
        "requestBody": json_body("Job"), "responses": with_errors(json!({"202": answer("the job's id")}))}}));
    paths.insert("/v1/jobs/{id}".into(), json!({
        "get": {"operationId": "get_job", "parameters": id, "responses": with_errors(json!({"200": answer("status, progress, result")}))},
        "delete": {"operationId": "cancel_job", "parameters": id, "responses": with_errors(json!({"200": answer("the job, cancelled")}))}}));
    paths.insert("/v1/batch".into(), json!({"post": {"summary": "One verb over many patches of a patchset", "operationId": "batch",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object"}}}},
        "responses": with_errors(json!({"200": answer("one result per patch")}))}}));
    for (p, op) in [("/v1/health", "health"), ("/v1/devices", "devices")] {
        paths.insert(
            p.into(),
            json!({"get": {"operationId": op, "responses": {"200": answer(op)}}}),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "nextstat-server", "version": env!("CARGO_PKG_VERSION")},
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    })
}

pub async fn document() -> Json<Value> {
    Json(build())
}
