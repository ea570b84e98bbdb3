"""What the Vulkan driver offers for tensor-core products, read straight from the loader with
ctypes (no Vulkan SDK, no vulkaninfo and its window-system libraries): each physical device's
name and driver, whether it has VK_KHR_cooperative_matrix (wgpu 30's
EXPERIMENTAL_COOPERATIVE_MATRIX) and VK_NV_cooperative_matrix2, the KHR shapes and types,
and, where the NV extension is there, its features and flexible dimensions.

Usage: python3 benches/vk_coop_probe.py [--json PATH]"""
import ctypes as C
import json
import sys

COMPONENT = {0: "f16", 1: "f32", 2: "f64", 3: "s8", 4: "s16", 5: "s32", 6: "s64", 7: "u8",
             8: "u16", 9: "u32", 10: "u64", 1000141000: "bf16", 1000491002: "e4m3",
             1000491003: "e5m2"}
SCOPE = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue_family"}


class AppInfo(C.Structure):
    _fields_ = [("sType", C.c_uint32), ("pNext", C.c_void_p), ("pApplicationName", C.c_char_p),
                ("applicationVersion", C.c_uint32), ("pEngineName", C.c_char_p),
                ("engineVersion", C.c_uint32), ("apiVersion", C.c_uint32)]


class InstanceInfo(C.Structure):
    _fields_ = [("sType", C.c_uint32), ("pNext", C.c_void_p), ("flags", C.c_uint32),
                ("pApplicationInfo", C.POINTER(AppInfo)), ("enabledLayerCount", C.c_uint32),
                ("ppEnabledLayerNames", C.c_void_p), ("enabledExtensionCount", C.c_uint32),
                ("ppEnabledExtensionNames", C.c_void_p)]


class ExtensionProperties(C.Structure):
    _fields_ = [("extensionName", C.c_char * 256), ("specVersion", C.c_uint32)]


class CoopProperties(C.Structure):
    # VkCooperativeMatrixPropertiesKHR
    _fields_ = [("sType", C.c_uint32), ("pNext", C.c_void_p), ("M", C.c_uint32), ("N", C.c_uint32),
                ("K", C.c_uint32), ("A", C.c_uint32), ("B", C.c_uint32), ("C", C.c_uint32),
                ("Result", C.c_uint32), ("saturating", C.c_uint32), ("scope", C.c_uint32)]


class FlexibleProperties(C.Structure):
    # VkCooperativeMatrixFlexibleDimensionsPropertiesNV
    _fields_ = [("sType", C.c_uint32), ("pNext", C.c_void_p), ("M", C.c_uint32), ("N", C.c_uint32),
                ("K", C.c_uint32), ("A", C.c_uint32), ("B", C.c_uint32), ("C", C.c_uint32),
                ("Result", C.c_uint32), ("saturating", C.c_uint32), ("scope", C.c_uint32),
                ("workgroupInvocations", C.c_uint32)]


COOP2_FEATURES = ["workgroup_scope", "flexible_dimensions", "reductions", "conversions",
                  "per_element_operations", "tensor_addressing", "block_loads"]


class Coop2Features(C.Structure):
    # VkPhysicalDeviceCooperativeMatrix2FeaturesNV
    _fields_ = [("sType", C.c_uint32), ("pNext", C.c_void_p)] + [(n, C.c_uint32) for n in COOP2_FEATURES]


class Features2(C.Structure):
    # VkPhysicalDeviceFeatures2: 55 VkBool32 of VkPhysicalDeviceFeatures
    _fields_ = [("sType", C.c_uint32), ("pNext", C.c_void_p), ("features", C.c_uint32 * 55)]


def listed(fn, *args, kind):
    count = C.c_uint32(0)
    fn(*args, C.byref(count), None)
    items = (kind * count.value)()
    for item in items:
        if hasattr(item, "sType"):
            item.sType = kind.STYPE
    fn(*args, C.byref(count), items)
    return list(items[:count.value])


CoopProperties.STYPE = 1000506001
FlexibleProperties.STYPE = 1000593001


def types(p):
    """A shape's operand types and scope, as "f16*f16+f32->f32 subgroup"."""
    name = lambda t: COMPONENT.get(t, t)
    return f"{name(p.A)}*{name(p.B)}+{name(p.C)}->{name(p.Result)} {SCOPE.get(p.scope, p.scope)}"


def main(argv):
    vk = C.CDLL("libvulkan.so.1")
    vk.vkGetInstanceProcAddr.restype = C.c_void_p
    vk.vkGetInstanceProcAddr.argtypes = [C.c_void_p, C.c_char_p]
    app = AppInfo(0, None, b"convoy probe", 1, b"convoy", 1, (1 << 22) | (3 << 12))
    info = InstanceInfo(1, None, 0, C.pointer(app), 0, None, 0, None)
    instance = C.c_void_p()
    rc = vk.vkCreateInstance(C.byref(info), None, C.byref(instance))
    if rc != 0:
        sys.exit(f"vk_coop_probe: vkCreateInstance failed ({rc})")

    def proc(name, restype, *argtypes):
        address = vk.vkGetInstanceProcAddr(instance, name.encode())
        return C.CFUNCTYPE(restype, *argtypes)(address) if address else None

    count = C.c_uint32(0)
    vk.vkEnumeratePhysicalDevices(instance, C.byref(count), None)
    devices = (C.c_void_p * count.value)()
    vk.vkEnumeratePhysicalDevices(instance, C.byref(count), devices)
    coop_khr = proc("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", C.c_int32, C.c_void_p,
                    C.POINTER(C.c_uint32), C.c_void_p)
    flexible = proc("vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV", C.c_int32,
                    C.c_void_p, C.POINTER(C.c_uint32), C.c_void_p)
    features2 = proc("vkGetPhysicalDeviceFeatures2", None, C.c_void_p, C.c_void_p)
    out = []
    for device in devices:
        props = (C.c_uint8 * 1024)()
        vk.vkGetPhysicalDeviceProperties(C.c_void_p(device), props)
        raw = bytes(props)
        name = raw[20:276].split(b"\0")[0].decode()
        driver = int.from_bytes(raw[4:8], "little")
        exts = listed(vk.vkEnumerateDeviceExtensionProperties, C.c_void_p(device), None, kind=ExtensionProperties)
        names = {e.extensionName.decode(): e.specVersion for e in exts}
        entry = {"device": name, "driver_version": driver,
                 "extensions": {k: v for k, v in names.items() if "cooperative" in k or "shader_float16" in k
                                or "bfloat16" in k or "integer_dot" in k}}
        if "VK_KHR_cooperative_matrix" in names and coop_khr:
            entry["khr_shapes"] = [f"{p.M}x{p.N}x{p.K} {types(p)}"
                                   for p in listed(coop_khr, C.c_void_p(device), kind=CoopProperties)]
        if "VK_NV_cooperative_matrix2" in names:
            if features2:
                coop2 = Coop2Features(1000593000, None)
                f2 = Features2(1000059000, C.cast(C.pointer(coop2), C.c_void_p))
                features2(C.c_void_p(device), C.byref(f2))
                entry["coop2_features"] = {n: bool(getattr(coop2, n)) for n in COOP2_FEATURES}
            if flexible:
                entry["coop2_flexible"] = [f"{p.M}x{p.N}x{p.K} granularity {types(p)} {p.workgroupInvocations} invocations"
                                           for p in listed(flexible, C.c_void_p(device), kind=FlexibleProperties)]
        out.append(entry)
        print(json.dumps(entry, indent=1))
    vk.vkDestroyInstance(instance, None)
    if "--json" in argv:
        json.dump(out, open(argv[argv.index("--json") + 1], "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
