// ssa-merge: the API server's field management for the kube tests, computed by the library the
// kube-apiserver itself uses (sigs.k8s.io/structured-merge-diff) over schemas converted by
// kube-openapi's own converter (pkg/schemaconv).
//
// It reads one JSON request per line on standard input and answers one JSON line each:
//
//	{"op": "apply"|"update", "manager": "kerf", "force": true, "time": "RFC 3339",
//	 "live": <the stored object, managedFields included, or null>,
//	 "object": <the applied configuration, or the whole new object of an update>,
//	 "crd": <the CRD's openAPIV3Schema, for a custom kind>}
//	→ {"object": <the object to store, managedFields included>}
//	| {"error": "...", "conflicts": [{"manager": "...", "field": "..."}]}
//
// What the library leaves to the API server's wrapper (k8s.io/apiserver
// pkg/endpoints/handlers/fieldmanager) is done here as the wrapper does it: manager identifiers
// per operation (an applier's without its apiVersion), the fields never recorded as owned
// (stripmeta.go), status kept from the live object and ignored for the main resource, `time`
// bumped only when an operation changed something (managedfieldsupdater.go), an update
// recorded under a temporary manager and merged into the manager's entry, quantities of
// built-in kinds canonicalized after decoding (an apply compares the raw text first), and the
// HorizontalPodAutoscaler's autoscaling/v1 ↔ v2 conversion (pkg/apis/autoscaling/v1/conversion.go).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/ioutil"
	"math/big"
	"os"
	"regexp"
	"sort"
	"strings"

	openapi_v2 "github.com/googleapis/gnostic/OpenAPIv2"
	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/util/proto"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v4/merge"
	"sigs.k8s.io/structured-merge-diff/v4/typed"
	"sigs.k8s.io/structured-merge-diff/v4/value"
)

const defaultSwagger = "/usr/share/gocode/src/k8s.io/kube-openapi/pkg/schemaconv/testdata/swagger.json"

// The built-in kinds the tests store, by apiVersion/kind, with the swagger definition (v1.13)
// that describes them. Versions newer than the swagger map to the shape they kept.
var builtin = map[string]string{
	"apps/v1/Deployment":                          "io.k8s.api.apps.v1.Deployment",
	"apps/v1/StatefulSet":                         "io.k8s.api.apps.v1.StatefulSet",
	"apps/v1/DaemonSet":                           "io.k8s.api.apps.v1.DaemonSet",
	"apps/v1/ReplicaSet":                          "io.k8s.api.apps.v1.ReplicaSet",
	"batch/v1/Job":                                "io.k8s.api.batch.v1.Job",
	"batch/v1/CronJob":                            "io.k8s.api.batch.v1beta1.CronJob",
	"v1/Pod":                                      "io.k8s.api.core.v1.Pod",
	"v1/ConfigMap":                                "io.k8s.api.core.v1.ConfigMap",
	"autoscaling/v1/HorizontalPodAutoscaler":      "io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler",
	"autoscaling/v2/HorizontalPodAutoscaler":      "io.k8s.api.autoscaling.v2beta2.HorizontalPodAutoscaler",
	"autoscaling/v2beta2/HorizontalPodAutoscaler": "io.k8s.api.autoscaling.v2beta2.HorizontalPodAutoscaler",
	"policy/v1/PodDisruptionBudget":               "io.k8s.api.policy.v1beta1.PodDisruptionBudget",
}

type request struct {
	Op      string                 `json:"op"`
	Manager string                 `json:"manager"`
	Force   bool                   `json:"force"`
	Time    string                 `json:"time"`
	Live    map[string]interface{} `json:"live"`
	Object  map[string]interface{} `json:"object"`
	CRD     map[string]interface{} `json:"crd"`
}

type conflict struct {
	Manager string `json:"manager"`
	Field   string `json:"field"`
}

type response struct {
	Object    map[string]interface{} `json:"object,omitempty"`
	Error     string                 `json:"error,omitempty"`
	Conflicts []conflict             `json:"conflicts,omitempty"`
}

type managedEntry struct {
	Manager     string          `json:"manager,omitempty"`
	Operation   string          `json:"operation,omitempty"`
	APIVersion  string          `json:"apiVersion,omitempty"`
	Time        string          `json:"time,omitempty"`
	FieldsType  string          `json:"fieldsType,omitempty"`
	FieldsV1    json.RawMessage `json:"fieldsV1,omitempty"`
	Subresource string          `json:"subresource,omitempty"`
}

type server struct {
	swagger map[string]interface{}
	builtin *typed.Parser
	crds    map[string]*typed.Parser
}

func main() {
	path := defaultSwagger
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	raw, err := ioutil.ReadFile(path)
	if err != nil {
		fail(err)
	}
	s := &server{crds: map[string]*typed.Parser{}}
	if err := json.Unmarshal(raw, &s.swagger); err != nil {
		fail(err)
	}
	if s.builtin, err = parserFor(raw); err != nil {
		fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			resp = s.handle(&req)
		}
		b, _ := json.Marshal(resp)
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ssa-merge:", err)
	os.Exit(1)
}

func parserFor(swagger []byte) (*typed.Parser, error) {
	doc, err := openapi_v2.ParseDocument(swagger)
	if err != nil {
		return nil, err
	}
	models, err := proto.NewOpenAPIData(doc)
	if err != nil {
		return nil, err
	}
	sc, err := schemaconv.ToSchemaWithPreserveUnknownFields(models, false)
	if err != nil {
		return nil, err
	}
	return &typed.Parser{Schema: *sc}, nil
}

// kindOf: the kind of an object, for the schema, and its versions.
type kindOf struct {
	parser  *typed.Parser
	types   map[string]string // apiVersion → schema type name
	storage string            // the apiVersion objects are stored at
	custom  bool
}

func (s *server) kind(req *request) (*kindOf, error) {
	apiVersion, _ := req.Object["apiVersion"].(string)
	kind, _ := req.Object["kind"].(string)
	if req.CRD != nil {
		p, err := s.crdParser(req.CRD)
		if err != nil {
			return nil, err
		}
		return &kindOf{parser: p, types: map[string]string{apiVersion: crdTypeName}, storage: apiVersion, custom: true}, nil
	}
	if kind == "HorizontalPodAutoscaler" {
		return &kindOf{parser: s.builtin, storage: "autoscaling/v2", types: map[string]string{
			"autoscaling/v1":      builtin["autoscaling/v1/HorizontalPodAutoscaler"],
			"autoscaling/v2":      builtin["autoscaling/v2/HorizontalPodAutoscaler"],
			"autoscaling/v2beta2": builtin["autoscaling/v2/HorizontalPodAutoscaler"],
		}}, nil
	}
	name, ok := builtin[apiVersion+"/"+kind]
	if !ok || name == "" {
		return nil, fmt.Errorf("no schema for %s %s: give its CRD's openAPIV3Schema", apiVersion, kind)
	}
	return &kindOf{parser: s.builtin, storage: apiVersion, types: map[string]string{apiVersion: name}}, nil
}

const crdTypeName = "io.kerf.test.CustomResource"

// crdParser converts a CRD's openAPIV3Schema as the apiextensions-apiserver does before the
// field manager sees it (controller/openapi/builder: the structural schema as a swagger
// definition, metadata as ObjectMeta; markers kept, what swagger 2.0 cannot say dropped).
func (s *server) crdParser(schema map[string]interface{}) (*typed.Parser, error) {
	key, _ := json.Marshal(schema)
	if p, ok := s.crds[string(key)]; ok {
		return p, nil
	}
	def := toSwagger(schema).(map[string]interface{})
	props, _ := def["properties"].(map[string]interface{})
	if props == nil {
		props = map[string]interface{}{}
		def["properties"] = props
	}
	props["metadata"] = map[string]interface{}{"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
	props["apiVersion"] = map[string]interface{}{"type": "string"}
	props["kind"] = map[string]interface{}{"type": "string"}
	defs := map[string]interface{}{}
	for k, v := range s.swagger["definitions"].(map[string]interface{}) {
		defs[k] = v
	}
	defs[crdTypeName] = def
	doc := map[string]interface{}{"swagger": "2.0", "info": map[string]interface{}{"title": "crd", "version": "v1"},
		"paths": map[string]interface{}{}, "definitions": defs}
	raw, _ := json.Marshal(doc)
	p, err := parserFor(raw)
	if err != nil {
		return nil, fmt.Errorf("CRD schema: %v", err)
	}
	s.crds[string(key)] = p
	return p, nil
}

var swaggerKeys = map[string]bool{"type": true, "properties": true, "items": true, "additionalProperties": true,
	"required": true, "format": true, "enum": true}

func toSwagger(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := map[string]interface{}{}
		for k, x := range t {
			switch {
			case k == "properties":
				props := map[string]interface{}{}
				for name, p := range x.(map[string]interface{}) {
					props[name] = toSwagger(p)
				}
				out[k] = props
			case k == "items" || k == "additionalProperties":
				out[k] = toSwagger(x)
			case k == "x-kubernetes-validations":
			case strings.HasPrefix(k, "x-kubernetes-") || swaggerKeys[k]:
				out[k] = x
			}
		}
		return out
	default:
		return v
	}
}

func (s *server) handle(req *request) response {
	k, err := s.kind(req)
	if err != nil {
		return response{Error: err.Error()}
	}
	version, _ := req.Object["apiVersion"].(string)
	if _, ok := k.types[version]; !ok {
		return response{Error: "unknown apiVersion " + version}
	}
	live := req.Live
	if live == nil {
		live = map[string]interface{}{}
	}
	managed, times, err := decodeManaged(live)
	if err != nil {
		return response{Error: err.Error()}
	}
	liveAtVersion := convertObject(k, strip(live), version)
	object := strip(req.Object)
	if !k.custom && req.Op == "update" {
		canonicalizeQuantities(object)
	}
	updater := &merge.Updater{Converter: converter{k}, IgnoredFields: map[fieldpath.APIVersion]*fieldpath.Set{}}
	for v := range k.types {
		updater.IgnoredFields[fieldpath.APIVersion(v)] = fieldpath.NewSet(fieldpath.MakePathOrDie("status"))
	}
	liveTV, err := k.parser.Type(k.types[version]).FromUnstructured(liveAtVersion)
	if err != nil {
		return response{Error: "live object: " + err.Error()}
	}
	objTV, err := k.parser.Type(k.types[version]).FromUnstructured(object)
	if err != nil {
		return response{Error: "object: " + err.Error()}
	}
	var result *typed.TypedValue
	var id string
	switch req.Op {
	case "apply":
		id = managerID(req.Manager, "Apply", "")
		result, managed, err = updater.Apply(liveTV, objTV, fieldpath.APIVersion(version), managed, id, req.Force)
		if err == nil && result != nil {
			times[id] = req.Time
		}
	case "update":
		id = managerID(req.Manager, "Update", version)
		const self = "current-operation"
		result, managed, err = updater.Update(liveTV, objTV, fieldpath.APIVersion(version), managed, self)
		if err == nil {
			if vs, ok := managed[self]; ok {
				delete(managed, self)
				if prev, ok := managed[id]; ok {
					managed[id] = fieldpath.NewVersionedSet(vs.Set().Union(prev.Set()), vs.APIVersion(), vs.Applied())
				} else {
					managed[id] = vs
				}
				times[id] = req.Time
			}
		}
	default:
		return response{Error: "unknown op " + req.Op}
	}
	if err != nil {
		if cs, ok := err.(merge.Conflicts); ok {
			r := response{Error: cs.Error()}
			for _, c := range cs {
				r.Conflicts = append(r.Conflicts, conflict{Manager: managerName(c.Manager), Field: c.Path.String()})
			}
			return r
		}
		return response{Error: err.Error()}
	}
	var merged map[string]interface{}
	if result == nil {
		merged = strip(live)
	} else {
		merged = convertObject(k, toMap(result.AsValue()), k.storage)
		if !k.custom {
			canonicalizeQuantities(merged)
		}
	}
	// Identity and status are the live object's: an operation on the main resource changes
	// neither.
	meta := map[string]interface{}{}
	if m, ok := live["metadata"].(map[string]interface{}); ok {
		for key, v := range m {
			meta[key] = v
		}
	}
	if m, ok := merged["metadata"].(map[string]interface{}); ok {
		for _, key := range []string{"labels", "annotations", "ownerReferences", "finalizers"} {
			if v, ok := m[key]; ok {
				meta[key] = v
			} else {
				delete(meta, key)
			}
		}
		for _, key := range []string{"name", "namespace"} {
			if _, ok := meta[key]; !ok {
				meta[key] = m[key]
			}
		}
	}
	meta["managedFields"] = encodeManaged(managed, times)
	merged["metadata"] = meta
	merged["apiVersion"] = k.storage
	if kind, ok := req.Object["kind"]; ok {
		merged["kind"] = kind
	}
	if st, ok := live["status"]; ok {
		merged["status"] = st
	} else {
		delete(merged, "status")
	}
	return response{Object: merged}
}

// strip: the object without managedFields (never part of what is merged).
func strip(obj map[string]interface{}) map[string]interface{} {
	b, _ := json.Marshal(obj)
	var out map[string]interface{}
	json.Unmarshal(b, &out)
	if out == nil {
		out = map[string]interface{}{}
	}
	if m, ok := out["metadata"].(map[string]interface{}); ok {
		delete(m, "managedFields")
		for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "selfLink"} {
			delete(m, k)
		}
	}
	return out
}

func toMap(v value.Value) map[string]interface{} {
	b, err := value.ToJSON(v)
	if err != nil {
		return map[string]interface{}{}
	}
	var out map[string]interface{}
	json.Unmarshal(b, &out)
	return out
}

func managerID(manager, operation, apiVersion string) string {
	e := managedEntry{Manager: manager, Operation: operation}
	if operation != "Apply" {
		e.APIVersion = apiVersion
	}
	b, _ := json.Marshal(e)
	return string(b)
}

func managerName(id string) string {
	var e managedEntry
	if json.Unmarshal([]byte(id), &e) != nil {
		return id
	}
	return e.Manager
}

func decodeManaged(obj map[string]interface{}) (fieldpath.ManagedFields, map[string]string, error) {
	managed := fieldpath.ManagedFields{}
	times := map[string]string{}
	meta, _ := obj["metadata"].(map[string]interface{})
	raw, _ := json.Marshal(meta["managedFields"])
	var entries []managedEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, nil, fmt.Errorf("managedFields: %v", err)
	}
	for _, e := range entries {
		set := fieldpath.NewSet()
		if len(e.FieldsV1) > 0 {
			if err := set.FromJSON(strings.NewReader(string(e.FieldsV1))); err != nil {
				return nil, nil, fmt.Errorf("managedFields %s: %v", e.Manager, err)
			}
		}
		id := managerID(e.Manager, e.Operation, e.APIVersion)
		managed[id] = fieldpath.NewVersionedSet(set, fieldpath.APIVersion(e.APIVersion), e.Operation == "Apply")
		times[id] = e.Time
	}
	return managed, times, nil
}

// Fields never recorded as owned (fieldmanager/internal/stripmeta.go).
var unowned = []fieldpath.Path{
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "clusterName"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
}

func encodeManaged(managed fieldpath.ManagedFields, times map[string]string) []interface{} {
	ids := make([]string, 0, len(managed))
	for id := range managed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := []interface{}{}
	for _, id := range ids {
		vs := managed[id]
		set := vs.Set().Difference(fieldpath.NewSet(unowned...))
		if set.Empty() {
			continue
		}
		var e managedEntry
		json.Unmarshal([]byte(id), &e)
		e.APIVersion = string(vs.APIVersion())
		e.Time = times[id]
		e.FieldsType = "FieldsV1"
		b, err := set.ToJSON()
		if err != nil {
			continue
		}
		e.FieldsV1 = b
		var m map[string]interface{}
		raw, _ := json.Marshal(e)
		json.Unmarshal(raw, &m)
		out = append(out, m)
	}
	return out
}

// converter: the kinds' versions (only the HorizontalPodAutoscaler has two here).
type converter struct{ k *kindOf }

func (c converter) Convert(tv *typed.TypedValue, version fieldpath.APIVersion) (*typed.TypedValue, error) {
	name, ok := c.k.types[string(version)]
	if !ok {
		return nil, missingVersion(version)
	}
	obj := convertObject(c.k, toMap(tv.AsValue()), string(version))
	return c.k.parser.Type(name).FromUnstructured(obj)
}

type missingVersion fieldpath.APIVersion

func (m missingVersion) Error() string { return "no version " + string(m) }

func (c converter) IsMissingVersionError(err error) bool {
	_, ok := err.(missingVersion)
	return ok
}

// convertObject: obj at apiVersion `to` (the HPA's v1 ↔ v2 conversion: v1's
// targetCPUUtilizationPercentage is v2's single Resource cpu Utilization metric).
func convertObject(k *kindOf, obj map[string]interface{}, to string) map[string]interface{} {
	from, _ := obj["apiVersion"].(string)
	if len(obj) == 0 || from == to || obj["kind"] != "HorizontalPodAutoscaler" {
		if len(obj) > 0 {
			obj["apiVersion"] = to
		}
		return obj
	}
	spec, _ := obj["spec"].(map[string]interface{})
	if spec == nil {
		spec = map[string]interface{}{}
	}
	out := map[string]interface{}{}
	for key, v := range spec {
		if key != "metrics" && key != "targetCPUUtilizationPercentage" && key != "behavior" {
			out[key] = v
		}
	}
	if to == "autoscaling/v1" {
		metrics, _ := spec["metrics"].([]interface{})
		for _, m := range metrics {
			mm, _ := m.(map[string]interface{})
			res, _ := mm["resource"].(map[string]interface{})
			target, _ := res["target"].(map[string]interface{})
			if mm["type"] == "Resource" && res["name"] == "cpu" && target["type"] == "Utilization" {
				out["targetCPUUtilizationPercentage"] = target["averageUtilization"]
			}
		}
	} else if t, ok := spec["targetCPUUtilizationPercentage"]; ok {
		out["metrics"] = []interface{}{map[string]interface{}{"type": "Resource", "resource": map[string]interface{}{
			"name": "cpu", "target": map[string]interface{}{"type": "Utilization", "averageUtilization": t}}}}
	}
	obj["spec"] = out
	obj["apiVersion"] = to
	delete(obj, "status")
	return obj
}

// canonicalizeQuantities: the quantities of container and pod resources and of HPA targets as
// the API server stores them (apimachinery resource.Quantity's canonical form).
func canonicalizeQuantities(v interface{}) {
	switch t := v.(type) {
	case map[string]interface{}:
		for key, x := range t {
			switch key {
			case "resources":
				if r, ok := x.(map[string]interface{}); ok {
					for _, which := range []string{"requests", "limits"} {
						if m, ok := r[which].(map[string]interface{}); ok {
							for name, q := range m {
								if s, ok := q.(string); ok {
									m[name] = canonicalQuantity(s)
								}
							}
						}
					}
				}
			case "averageValue", "value":
				if s, ok := x.(string); ok {
					t[key] = canonicalQuantity(s)
				}
			}
			canonicalizeQuantities(x)
		}
	case []interface{}:
		for _, x := range t {
			canonicalizeQuantities(x)
		}
	}
}

var quantityRe = regexp.MustCompile(`^([+-]?[0-9]*\.?[0-9]*)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$`)

var decimalSuffix = map[string]int{"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
var binarySuffix = map[string]int{"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}

// canonicalQuantity transcribes resource.Quantity's CanonicalizeBytes: BinarySI stays binary
// when the value is a whole number of at least 1024 (the largest exact power of 1024),
// anything else is DecimalSI with the largest exact power of 1000 (n at least).
func canonicalQuantity(s string) string {
	m := quantityRe.FindStringSubmatch(s)
	if m == nil || m[1] == "" {
		return s
	}
	num, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return s
	}
	suffix := m[2]
	binary := false
	switch {
	case binarySuffix[suffix] > 0:
		binary = true
		num.Mul(num, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(1024), big.NewInt(int64(binarySuffix[suffix])), nil)))
	case strings.HasPrefix(suffix, "e") || strings.HasPrefix(suffix, "E"):
		var e int
		fmt.Sscanf(suffix[1:], "%d", &e)
		num.Mul(num, pow10(e))
	default:
		num.Mul(num, pow10(decimalSuffix[suffix]))
	}
	// Precision below nano is rounded up, as the API server does.
	nano := new(big.Rat).Mul(num, pow10(9))
	if !nano.IsInt() {
		f := new(big.Int).Quo(nano.Num(), nano.Denom())
		if nano.Sign() > 0 {
			f.Add(f, big.NewInt(1))
		}
		num = new(big.Rat).Quo(new(big.Rat).SetInt(f), pow10(9))
	}
	if binary && num.IsInt() && new(big.Int).Abs(num.Num()).Cmp(big.NewInt(1024)) >= 0 {
		n := new(big.Int).Set(num.Num())
		k := 0
		for k < 6 {
			q, r := new(big.Int).QuoRem(n, big.NewInt(1024), new(big.Int))
			if r.Sign() != 0 {
				break
			}
			n = q
			k++
		}
		for name, e := range binarySuffix {
			if e == k {
				return n.String() + name
			}
		}
		return n.String()
	}
	if num.Sign() == 0 {
		return "0"
	}
	best := -9
	for e := 18; e >= -9; e -= 3 {
		if new(big.Rat).Quo(num, pow10(e)).IsInt() {
			best = e
			break
		}
	}
	mant := new(big.Rat).Quo(num, pow10(best))
	for name, e := range decimalSuffix {
		if e == best {
			return mant.Num().String() + name
		}
	}
	return s
}

func pow10(e int) *big.Rat {
	if e >= 0 {
		return new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(e)), nil))
	}
	return new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-e)), nil))
}
