//! A hand-written validator for the subset of JSON Schema that `schema/weir-bench-1.json`
//! uses: type (one or a list), const, enum, minimum, maximum, required, properties,
//! additionalProperties: false, items and local `$ref`s. Any other keyword fails loudly, so
//! the schema cannot grow past what is checked.

use serde_json::Value;

/// Every violation of `schema` by `document`, as `path: message`.
pub fn validate(schema: &Value, document: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(schema, schema, document, "$", &mut errors);
    errors
}

fn check(root: &Value, schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(rules) = schema.as_object() else {
        errors.push(format!("{path}: schema is not an object"));
        return;
    };
    for (keyword, rule) in rules {
        match keyword.as_str() {
            "$schema" | "$id" | "title" | "description" | "$defs" => {}
            "$ref" => {
                let target = rule
                    .as_str()
                    .and_then(|reference| reference.strip_prefix('#'))
                    .and_then(|pointer| root.pointer(pointer));
                match target {
                    Some(target) => check(root, target, value, path, errors),
                    None => errors.push(format!("{path}: unresolved $ref {rule}")),
                }
            }
            "type" => {
                let allowed: Vec<&str> = match rule {
                    Value::String(one) => vec![one.as_str()],
                    Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if !allowed.iter().any(|kind| is_type(value, kind)) {
                    errors.push(format!("{path}: {value} is not of type {rule}"));
                }
            }
            "const" if value != rule => errors.push(format!("{path}: {value} is not {rule}")),
            "const" => {}
            "enum" => {
                if !rule
                    .as_array()
                    .is_some_and(|options| options.contains(value))
                {
                    errors.push(format!("{path}: {value} is not one of {rule}"));
                }
            }
            "minimum" => {
                if let (Some(number), Some(bound)) = (value.as_f64(), rule.as_f64())
                    && number < bound
                {
                    errors.push(format!("{path}: {number} < minimum {bound}"));
                }
            }
            "maximum" => {
                if let (Some(number), Some(bound)) = (value.as_f64(), rule.as_f64())
                    && number > bound
                {
                    errors.push(format!("{path}: {number} > maximum {bound}"));
                }
            }
            "required" => {
                if let Some(object) = value.as_object() {
                    for name in rule
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                    {
                        if !object.contains_key(name) {
                            errors.push(format!("{path}: missing {name}"));
                        }
                    }
                }
            }
            "properties" => {
                if let (Some(object), Some(properties)) = (value.as_object(), rule.as_object()) {
                    for (name, member) in object {
                        if let Some(member_schema) = properties.get(name) {
                            check(
                                root,
                                member_schema,
                                member,
                                &format!("{path}.{name}"),
                                errors,
                            );
                        }
                    }
                }
            }
            "additionalProperties" => {
                let known = rules.get("properties").and_then(Value::as_object);
                if rule == &Value::Bool(false)
                    && let (Some(object), Some(known)) = (value.as_object(), known)
                {
                    for name in object.keys().filter(|name| !known.contains_key(*name)) {
                        errors.push(format!("{path}: unexpected {name}"));
                    }
                }
            }
            "items" => {
                for (index, item) in value.as_array().into_iter().flatten().enumerate() {
                    check(root, rule, item, &format!("{path}[{index}]"), errors);
                }
            }
            other => errors.push(format!("{path}: unsupported schema keyword {other}")),
        }
    }
}

fn is_type(value: &Value, kind: &str) -> bool {
    match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_u64() || value.is_i64(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => false,
    }
}
