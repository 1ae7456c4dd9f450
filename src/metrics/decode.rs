//! Decoding of a Prometheus `/api/v1/query_range` answer in one pass over the bytes, straight
//! into the query's groups: only the three key labels of a series are copied, a sample value is
//! parsed from the borrowed JSON string (no `String` per sample), and nothing else is kept. With
//! a real Prometheus this decoding is most of a cycle's CPU (`kerf bench decode` compares it
//! with `serde_json::Value` and a streaming decoder; see docs/performance.md).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::promql::Group;

/// The label names whose values key a series (`""`: the series has no such label).
#[derive(Clone, Copy, Debug)]
pub struct KeyLabels<'q> {
    pub namespace: &'q str,
    pub pod: &'q str,
    pub container: &'q str,
}

/// The parts of an answer kerf reads.
#[derive(Default)]
pub struct Answer {
    pub status: String,
    pub error_type: Option<String>,
    pub error: Option<String>,
    pub warnings: Vec<String>,
    /// `None`: no `data` (or `data: null`).
    pub data: Option<Data>,
}

#[derive(Default)]
pub struct Data {
    pub result_type: String,
    pub result: Vec<Group>,
    /// The first sample value that is not a number, if any (its series are still decoded).
    pub bad_value: Option<String>,
    /// Samples the query loaded (`stats=all`: `stats.samples.totalQueryableSamples`).
    pub samples_loaded: Option<u64>,
}

#[derive(serde::Deserialize)]
struct Stats {
    #[serde(default)]
    samples: Option<SampleStats>,
}

#[derive(serde::Deserialize)]
struct SampleStats {
    #[serde(default, rename = "totalQueryableSamples")]
    total_queryable_samples: Option<u64>,
}

/// Decodes `body`; a JSON error is what `serde_json` says about it.
pub fn decode(labels: KeyLabels<'_>, body: &[u8]) -> Result<Answer, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let answer = AnswerSeed(labels).deserialize(&mut de)?;
    de.end()?;
    Ok(answer)
}

struct AnswerSeed<'q>(KeyLabels<'q>);

impl<'de> DeserializeSeed<'de> for AnswerSeed<'_> {
    type Value = Answer;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Answer, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AnswerSeed<'_> {
    type Value = Answer;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a query_range answer")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Answer, A::Error> {
        let mut out = Answer::default();
        let mut status = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key.0.as_ref() {
                "status" => status = Some(map.next_value::<String>()?),
                "errorType" => out.error_type = map.next_value()?,
                "error" => out.error = map.next_value()?,
                "warnings" => out.warnings = map.next_value()?,
                "data" => out.data = map.next_value_seed(DataSeed(self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        out.status = status.ok_or_else(|| de::Error::missing_field("status"))?;
        Ok(out)
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(v.to_string().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// `data`: null or `{resultType, result}`.
struct DataSeed<'q>(KeyLabels<'q>);

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Option<Data>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Data>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = Option<Data>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("null or a data object")
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<Data>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Data>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<Data>, D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Data>, A::Error> {
        let mut result_type = None;
        let mut result = None;
        let mut bad_value = None;
        let mut samples_loaded = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key.0.as_ref() {
                "resultType" => result_type = Some(map.next_value::<String>()?),
                "stats" => {
                    samples_loaded = map
                        .next_value::<Option<Stats>>()?
                        .and_then(|s| s.samples)
                        .and_then(|s| s.total_queryable_samples);
                }
                "result" => {
                    result = Some(map.next_value_seed(ResultSeed {
                        labels: self.0,
                        bad_value: &mut bad_value,
                    })?)
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(Data {
            result_type: result_type.ok_or_else(|| de::Error::missing_field("resultType"))?,
            result: result.ok_or_else(|| de::Error::missing_field("result"))?,
            bad_value,
            samples_loaded,
        }))
    }
}

/// `result`: the series, each decoded into a [`Group`].
struct ResultSeed<'q, 'b> {
    labels: KeyLabels<'q>,
    bad_value: &'b mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for ResultSeed<'_, '_> {
    type Value = Vec<Group>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Group>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ResultSeed<'_, '_> {
    type Value = Vec<Group>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of series")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Group>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(g) = seq.next_element_seed(SeriesSeed {
            labels: self.labels,
            bad_value: &mut *self.bad_value,
        })? {
            out.push(g);
        }
        Ok(out)
    }
}

/// One series: `{metric: {labels}, values: [[ts, "v"], …]}`.
struct SeriesSeed<'q, 'b> {
    labels: KeyLabels<'q>,
    bad_value: &'b mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for SeriesSeed<'_, '_> {
    type Value = Group;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Group, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SeriesSeed<'_, '_> {
    type Value = Group;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a series object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Group, A::Error> {
        let mut g = Group {
            namespace: String::new(),
            pod: String::new(),
            container: String::new(),
            points: Vec::new(),
        };
        while let Some(key) = map.next_key::<Key>()? {
            match key.0.as_ref() {
                "metric" => map.next_value_seed(LabelsSeed {
                    labels: self.labels,
                    group: &mut g,
                })?,
                "values" => {
                    g.points = map.next_value_seed(ValuesSeed {
                        bad_value: &mut *self.bad_value,
                    })?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(g)
    }
}

/// The series' labels: only the key labels' values are copied.
struct LabelsSeed<'q, 'g> {
    labels: KeyLabels<'q>,
    group: &'g mut Group,
}

impl<'de> DeserializeSeed<'de> for LabelsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LabelsSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of label values")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let l = self.labels;
        while let Some(key) = map.next_key::<Key>()? {
            let k = key.0.as_ref();
            // An empty label name is never a key label ("" means the query has none).
            let slot = if k.is_empty() {
                None
            } else if k == l.namespace {
                Some(&mut self.group.namespace)
            } else if k == l.pod {
                Some(&mut self.group.pod)
            } else if k == l.container {
                Some(&mut self.group.container)
            } else {
                None
            };
            match slot {
                Some(s) => *s = map.next_value::<String>()?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `values`: `[[ts, "v"], …]` into (unix seconds, value) points.
struct ValuesSeed<'b> {
    bad_value: &'b mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for ValuesSeed<'_> {
    type Value = Vec<(i64, f64)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ValuesSeed<'_> {
    type Value = Vec<(i64, f64)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of [timestamp, value] pairs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(p) = seq.next_element_seed(PointSeed {
            bad_value: &mut *self.bad_value,
        })? {
            out.push(p);
        }
        Ok(out)
    }
}

struct PointSeed<'b> {
    bad_value: &'b mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for PointSeed<'_> {
    type Value = (i64, f64);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(i64, f64), D::Error> {
        d.deserialize_tuple(2, self)
    }
}

impl<'de> Visitor<'de> for PointSeed<'_> {
    type Value = (i64, f64);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a [timestamp, value] pair")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(i64, f64), A::Error> {
        let ts: f64 = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let value = seq
            .next_element_seed(SampleValue)?
            .ok_or_else(|| de::Error::invalid_length(1, &self))?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(3, &self));
        }
        if !ts.is_finite() {
            return Err(de::Error::custom(format!(
                "sample timestamp {ts} is not finite"
            )));
        }
        let value = match value {
            Ok(v) => v,
            Err(text) => {
                self.bad_value.get_or_insert(text);
                f64::NAN
            }
        };
        Ok((ts.round() as i64, value))
    }
}

/// A sample value: a JSON string holding a number (`NaN`, `+Inf` included); `Err(text)` when it
/// is not one.
struct SampleValue;

impl<'de> DeserializeSeed<'de> for SampleValue {
    type Value = Result<f64, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for SampleValue {
    type Value = Result<f64, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sample value string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.parse::<f64>().map_err(|_| v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABELS: KeyLabels<'static> = KeyLabels {
        namespace: "ns",
        pod: "pod",
        container: "ctr",
    };

    #[test]
    fn keeps_only_key_labels_and_parses_values_in_any_field_order() {
        let body = br#"{"data":{"result":[
            {"values":[[1.4,"1.5"],[60,"NaN"],[120,"-Inf"]],"metric":{"x":"1","ns":"a","pod":"p\u0031","ctr":"c"}},
            {"metric":{"pod":"q"}}],"resultType":"matrix"},"warnings":["w"],"status":"success"}"#;
        let a = decode(LABELS, body).unwrap();
        assert_eq!((a.status.as_str(), a.warnings.len()), ("success", 1));
        let d = a.data.unwrap();
        assert_eq!(d.result_type, "matrix");
        let g = &d.result[0];
        assert_eq!((&*g.namespace, &*g.pod, &*g.container), ("a", "p1", "c"));
        assert_eq!(g.points[0], (1, 1.5));
        assert!(g.points[1].1.is_nan());
        assert_eq!(g.points[2].1, f64::NEG_INFINITY);
        assert_eq!((&*d.result[1].pod, d.result[1].points.len()), ("q", 0));
        assert!(d.bad_value.is_none());
    }

    #[test]
    fn a_query_without_container_label_never_matches_an_empty_label_name() {
        let labels = KeyLabels {
            container: "",
            ..LABELS
        };
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"":"x","ns":"a"},"values":[]}]}}"#;
        let d = decode(labels, body).unwrap().data.unwrap();
        assert_eq!(d.result[0].container, "");
    }

    #[test]
    fn malformed_answers_are_errors_or_reported() {
        for bad in [
            &br#"{"status":"success","data":{"resultType":"matrix","result":[{"values":[[0]]}]}}"#[..],
            br#"{"status":"success","data":{"resultType":"matrix","result":[{"values":[[0,"1",2]]}]}}"#,
            br#"{"status":"success","data":{"resultType":"matrix"}}"#,
            br#"{"data":null}"#,
            br#"{"status":"success"} x"#,
            b"",
        ] {
            assert!(decode(LABELS, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[{"values":[[0,"x"],[1,"y"]]}]}}"#;
        let d = decode(LABELS, body).unwrap().data.unwrap();
        assert_eq!(d.bad_value.as_deref(), Some("x"));
        let d = decode(LABELS, br#"{"status":"error","data":null}"#).unwrap();
        assert!(d.data.is_none());
    }
}
