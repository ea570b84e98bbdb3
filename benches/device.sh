# Sourced by the scripts of the GPU machine's runs (benches/results/*/call*/run.sh), from the
# repository's root there, with the Vulkan loader's packages in .gl/ and xz-packed binaries,
# HEAD_BUILT and the scripts in .gpu/ ("Reproducing" in BENCHMARKS.md): the loader
# unpacked, the NVIDIA driver's ICD chosen, the binaries unpacked, $O made and verify.txt begun
# with what was built and which GPU runs it. `finish` packs $O into call.tgz, verify.txt beside it.
for f in .gl/*.deb; do dpkg -x "$f" / >/dev/null; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
(cd .gpu && for f in *.xz; do unxz -kf "$f" && chmod +x "${f%.xz}"; done)
O=${OUT:-/tmp/out}
mkdir -p "$O"
cat .gpu/HEAD_BUILT > "$O/verify.txt"
nvidia-smi --query-gpu=name,pci.bus_id,serial,driver_version --format=csv,noheader | tee -a "$O/verify.txt"
S=$(date +%s)

# Seconds since the preamble ran.
elapsed() { echo $(( $(date +%s) - S )); }

# `convoy bench` of a model in mixed precision, its JSON to $O/NAME.json and one line to verify.txt:
# bench BINARY MODEL IMAGE_SIZE BATCH CLASSES STEPS NAME
bench() {
    timeout 40 ".gpu/$1" bench --model "$2" --image-size "$3" --batch-size "$4" --classes "$5" --devices 0 --steps "$6" --no-scaling --precision mixed --json 2>/dev/null | tail -1 > "$O/$7.json"
    python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a "$O/verify.txt"
}

finish() {
    (cd "$O" && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .)
}
