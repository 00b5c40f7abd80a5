//! Parca's HTTP/JSON routes, as its grpc-gateway maps them from the `google.api.http`
//! annotations of `parca.query.v1alpha1.QueryService`: `GET /profiles/types`,
//! `/profiles/labels`, `/profiles/labels/{label_name}/values`, `/profiles/query_range`,
//! `/profiles/query`, `/profiles/series`, `/profiles/has_profile_data` and `POST
//! /profiles/share`.
//!
//! As in grpc-gateway, a route is the gRPC method itself: the path's variables and the query
//! parameters fill the request message (a parameter names a field, dotted into nested
//! messages: `merge.query`, `diff.a.merge.start`; by its JSON or its proto name; enums by name
//! or number, times and durations as proto3's JSON writes them), the method answers as it
//! answers gRPC, and the answer is written in proto3's JSON with every field present (the
//! gateway's `EmitUnpopulated`). So a number is the same over every transport, and every mode
//! and report of `Query` is served here too. Errors are grpc-gateway's
//! `{"code", "message", "details"}` with the HTTP status of the gRPC code.

use std::sync::Arc;

use hyper::Response;
use prost::Message as _;
use prost_reflect::{DynamicMessage, Kind, ReflectMessage as _, Value};

use crate::Api;
use crate::call::Call;
use crate::protocols::connect;
use crate::protocols::grpc::PARCA_QUERY;
use crate::response::{Body, json_response, with_type};

/// The service whose methods the routes map.
const SERVICE: &str = "parca.query.v1alpha1.QueryService";

/// Answers a path under `/profiles/`; unknown ones get a JSON 404.
pub(crate) async fn handle(api: &Arc<Api>, call: Call) -> Response<Body> {
    match answer(api, &call).await {
        Ok(json) => with_type(json, "application/json"),
        Err(status) => gateway_error(&status),
    }
}

async fn answer(api: &Arc<Api>, call: &Call) -> Result<Vec<u8>, tonic::Status> {
    let (method, variables) = route(call)?;
    let descriptor = connect::message(SERVICE, method, true)?;
    let request = if method == "ShareProfile" {
        // `body: "*"`: the whole request is the JSON body.
        connect::json_to_proto(SERVICE, method, &call.body)?
    } else {
        let mut request = DynamicMessage::new(descriptor);
        for (name, value) in variables
            .iter()
            .map(|(n, v)| (*n, v.as_str()))
            .chain(call.params.pairs().filter(|(name, _)| !name.is_empty()))
        {
            set_parameter(&mut request, name, value).map_err(|fault| {
                tonic::Status::invalid_argument(format!("parameter `{name}`: {fault}"))
            })?;
        }
        request.encode_to_vec()
    };
    let answer = connect::call_method(api, &format!("{PARCA_QUERY}{method}"), &request).await?;
    connect::proto_to_json(SERVICE, method, &answer, true)
}

/// A gRPC method's name and the request fields a path's variables fill.
type Route = (&'static str, Vec<(&'static str, String)>);

/// The method a path and HTTP method map to, and the path's variables.
fn route(call: &Call) -> Result<Route, tonic::Status> {
    let get = call.method == hyper::Method::GET || call.method == hyper::Method::HEAD;
    if let Some(name) = call
        .path
        .strip_prefix("/profiles/labels/")
        .and_then(|rest| rest.strip_suffix("/values"))
        && get
    {
        return Ok(("Values", vec![("label_name", percent_decode(name))]));
    }
    let method = match (call.path.as_str(), get) {
        ("/profiles/types", true) => "ProfileTypes",
        ("/profiles/labels", true) => "Labels",
        ("/profiles/query_range", true) => "QueryRange",
        ("/profiles/query", true) => "Query",
        ("/profiles/series", true) => "Series",
        ("/profiles/has_profile_data", true) => "HasProfileData",
        ("/profiles/share", false) if call.method == hyper::Method::POST => "ShareProfile",
        (
            "/profiles/types"
            | "/profiles/labels"
            | "/profiles/query_range"
            | "/profiles/query"
            | "/profiles/series"
            | "/profiles/has_profile_data"
            | "/profiles/share",
            _,
        ) => {
            return Err(tonic::Status::unimplemented(format!(
                "{} is not allowed on {}: Parca's gateway takes GET there (POST on /profiles/share)",
                call.method, call.path
            )));
        }
        _ => {
            return Err(tonic::Status::not_found(format!(
                "no endpoint at {}: Parca's HTTP routes are /profiles/types, /profiles/labels, \
                 /profiles/labels/{{name}}/values, /profiles/query_range, /profiles/query, \
                 /profiles/series, /profiles/has_profile_data and /profiles/share",
                call.path
            )));
        }
    };
    Ok((method, Vec::new()))
}

/// Sets the field a (dotted) parameter names to `text`; repeated fields take one value per
/// occurrence.
fn set_parameter(message: &mut DynamicMessage, path: &str, text: &str) -> Result<(), String> {
    let mut current = message;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let descriptor = current.descriptor();
        let field = descriptor
            .get_field_by_json_name(part)
            .or_else(|| descriptor.get_field_by_name(part))
            .ok_or_else(|| format!("{} has no field `{part}`", descriptor.name()))?;
        if parts.peek().is_some() {
            if field.is_list() || field.is_map() || !matches!(field.kind(), Kind::Message(_)) {
                return Err(format!("`{part}` is not a message with fields of its own"));
            }
            current = current
                .get_field_mut(&field)
                .as_message_mut()
                .ok_or_else(|| format!("`{part}` is not a message"))?;
            continue;
        }
        if field.is_map() {
            return Err(format!(
                "`{part}` is a map, which a query parameter cannot fill"
            ));
        }
        let value = scalar(&field.kind(), text)?;
        if field.is_list() {
            if let Some(list) = current.get_field_mut(&field).as_list_mut() {
                list.push(value);
            }
        } else {
            current.set_field(&field, value);
        }
    }
    Ok(())
}

/// `text` as a value of `kind`, read as grpc-gateway reads query parameters.
fn scalar(kind: &Kind, text: &str) -> Result<Value, String> {
    let bad = |what: &str| format!("`{text}` is not {what}");
    Ok(match kind {
        Kind::Double => Value::F64(text.parse().map_err(|_| bad("a number"))?),
        Kind::Float => Value::F32(text.parse().map_err(|_| bad("a number"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(text.parse().map_err(|_| bad("a 32-bit integer"))?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Value::I64(text.parse().map_err(|_| bad("an integer"))?)
        }
        Kind::Uint32 | Kind::Fixed32 => {
            Value::U32(text.parse().map_err(|_| bad("a whole number"))?)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            Value::U64(text.parse().map_err(|_| bad("a whole number"))?)
        }
        Kind::Bool => Value::Bool(text.parse().map_err(|_| bad("true or false"))?),
        Kind::String => Value::String(text.to_owned()),
        Kind::Bytes => {
            use base64::Engine as _;
            let engines = [
                base64::engine::general_purpose::STANDARD,
                base64::engine::general_purpose::URL_SAFE,
            ];
            let bytes = engines
                .iter()
                .find_map(|e| e.decode(text).ok())
                .ok_or_else(|| bad("base64"))?;
            Value::Bytes(bytes.into())
        }
        Kind::Enum(e) => match e.get_value_by_name(text) {
            Some(v) => Value::EnumNumber(v.number()),
            None => Value::EnumNumber(text.parse().map_err(|_| {
                let names: Vec<String> = e.values().map(|v| v.name().to_owned()).collect();
                format!("`{text}` is not one of {}", names.join(", "))
            })?),
        },
        // Timestamps, durations and wrappers: their proto3 JSON form as a string.
        Kind::Message(m) => {
            let json = serde_json::Value::String(text.to_owned());
            let message = DynamicMessage::deserialize(m.clone(), json)
                .map_err(|e| format!("`{text}` is not a {}: {e}", m.name()))?;
            Value::Message(message)
        }
    })
}

/// grpc-gateway's error body with the HTTP status of the gRPC code.
fn gateway_error(status: &tonic::Status) -> Response<Body> {
    let mut response = json_response(&serde_json::json!({
        "code": status.code() as i32,
        "message": status.message(),
        "details": [],
    }));
    *response.status_mut() = connect::http_status(status.code());
    response
}

/// A path segment with its `%XX` escapes decoded (label names are ASCII; anything else is
/// left as it is and will match nothing).
fn percent_decode(segment: &str) -> String {
    form_urlencoded::parse(format!("x={}", segment.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, pairs: &[(&str, &str)]) -> Result<DynamicMessage, String> {
        let descriptor = connect::message(SERVICE, method, true).map_err(|e| e.to_string())?;
        let mut m = DynamicMessage::new(descriptor);
        for (name, value) in pairs {
            set_parameter(&mut m, name, value)?;
        }
        Ok(m)
    }

    #[test]
    fn parameters_fill_nested_fields_as_grpc_gateway_does() {
        let m = request(
            "Query",
            &[
                ("mode", "MODE_DIFF"),
                ("diff.a.mode", "MODE_MERGE"),
                ("diff.a.merge.query", "a:b:c:d:e"),
                ("diff.a.merge.start", "2023-11-14T22:00:00Z"),
                ("report_type", "3"),
                ("nodeTrimThreshold", "0.5"),
            ],
        )
        .expect("fills");
        let json = serde_json::to_value(&m).expect("json");
        assert_eq!(json["mode"], "MODE_DIFF");
        assert_eq!(json["diff"]["a"]["merge"]["query"], "a:b:c:d:e");
        assert_eq!(json["diff"]["a"]["merge"]["start"], "2023-11-14T22:00:00Z");
        assert_eq!(json["nodeTrimThreshold"], 0.5);
        assert!(json["reportType"].is_string(), "{json}");
        let m = request(
            "QueryRange",
            &[("step", "60s"), ("sumBy", "a"), ("sumBy", "b")],
        )
        .expect("fills");
        let json = serde_json::to_value(&m).expect("json");
        assert_eq!(json["step"], "60s");
        assert_eq!(json["sumBy"], serde_json::json!(["a", "b"]));
    }

    #[test]
    fn bad_parameters_are_named() {
        let fault = request("Query", &[("merge.qury", "x")]).unwrap_err();
        assert_eq!(fault, "MergeProfile has no field `qury`");
        let fault = request("Query", &[("mode", "MODE_NOPE")]).unwrap_err();
        assert!(
            fault.starts_with("`MODE_NOPE` is not one of MODE_SINGLE_UNSPECIFIED"),
            "{fault}"
        );
        let fault = request("QueryRange", &[("start", "yesterday")]).unwrap_err();
        assert!(
            fault.starts_with("`yesterday` is not a Timestamp"),
            "{fault}"
        );
        assert_eq!(percent_decode("a%2Eb"), "a.b");
    }
}
