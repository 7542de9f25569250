module gpu-policy-webhook/bench/gowebhook

go 1.22
