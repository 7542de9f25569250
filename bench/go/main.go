// Command gowebhook is the baseline of bench/latency.py: the least a Go admission webhook
// does, with the standard library only. It serves HTTPS with the certificate and key it is
// given, decodes each AdmissionReview into typed structs (as webhooks built on the
// Kubernetes types do; the object is kept as raw JSON) and allows it, echoing the uid. With
// -mutate-answer, each /mutate answer also carries the given fields (bench/apiserver.py
// --go-patch: this webhook's JSON Patch, so that the API server applies the same patch).
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"time"
)

// groupVersionKind mirrors metav1.GroupVersionKind.
type groupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// groupVersionResource mirrors metav1.GroupVersionResource.
type groupVersionResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

// userInfo mirrors authenticationv1.UserInfo.
type userInfo struct {
	Username string              `json:"username"`
	UID      string              `json:"uid"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra"`
}

// admissionRequest mirrors admissionv1.AdmissionRequest.
type admissionRequest struct {
	UID             string                `json:"uid"`
	Kind            groupVersionKind      `json:"kind"`
	Resource        groupVersionResource  `json:"resource"`
	SubResource     string                `json:"subResource"`
	RequestKind     *groupVersionKind     `json:"requestKind"`
	RequestResource *groupVersionResource `json:"requestResource"`
	Name            string                `json:"name"`
	Namespace       string                `json:"namespace"`
	Operation       string                `json:"operation"`
	UserInfo        userInfo              `json:"userInfo"`
	Object          json.RawMessage       `json:"object"`
	OldObject       json.RawMessage       `json:"oldObject"`
	DryRun          *bool                 `json:"dryRun"`
	Options         json.RawMessage       `json:"options"`
}

// admissionResponse mirrors the fields of admissionv1.AdmissionResponse an allow needs.
type admissionResponse struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

// admissionReview mirrors admissionv1.AdmissionReview.
type admissionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *admissionRequest  `json:"request,omitempty"`
	Response   *admissionResponse `json:"response,omitempty"`
}

// mutateAnswer holds more fields of the /mutate answer (-mutate-answer): a JSON object such as
// {"patchType": "JSONPatch", "patch": "..."} that every /mutate answer carries besides the uid.
var mutateAnswer map[string]json.RawMessage

// review decodes the AdmissionReview in the body and answers allowed with its uid.
func review(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 7<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in admissionReview
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		http.Error(w, "the body is not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	var out []byte
	if r.URL.Path == "/mutate" && mutateAnswer != nil {
		response := map[string]any{"uid": in.Request.UID, "allowed": true}
		for name, value := range mutateAnswer {
			response[name] = value
		}
		out, err = json.Marshal(map[string]any{
			"apiVersion": "admission.k8s.io/v1",
			"kind":       "AdmissionReview",
			"response":   response,
		})
	} else {
		out, err = json.Marshal(admissionReview{
			APIVersion: "admission.k8s.io/v1",
			Kind:       "AdmissionReview",
			Response:   &admissionResponse{UID: in.Request.UID, Allowed: true},
		})
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "address to listen on")
	cert := flag.String("cert", "tls.crt", "serving certificate (PEM)")
	key := flag.String("key", "tls.key", "serving key (PEM)")
	answer := flag.String("mutate-answer", "", "JSON object: more fields of every /mutate answer")
	flag.Parse()
	if *answer != "" {
		if err := json.Unmarshal([]byte(*answer), &mutateAnswer); err != nil {
			log.Fatalf("-mutate-answer: %v", err)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", review)
	mux.HandleFunc("/validate", review)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	server := &http.Server{
		Addr:              *addr,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// Longer than the API server's 90 s idle timeout, like the Python server's keepalive.
		IdleTimeout: 100 * time.Second,
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
