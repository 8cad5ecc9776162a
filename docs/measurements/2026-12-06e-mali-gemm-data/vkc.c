/* vkc FILE.spv... : create a compute pipeline from each SPIR-V file on the first device
   (bindings 0..7 storage buffers, 128 bytes of push constants). Scratch tool. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <dlfcn.h>
typedef void *H;
typedef int32_t VkResult;
typedef void (*PFN)(void);
typedef PFN (*GIPA)(H, const char *);
typedef struct { int sType; const void *pNext; const char *app; uint32_t appv; const char *eng; uint32_t engv; uint32_t api; } AppInfo;
typedef struct { int sType; const void *pNext; uint32_t flags; const AppInfo *app; uint32_t nl; const char *const *l; uint32_t ne; const char *const *e; } InstCI;
typedef struct { int sType; const void *pNext; uint32_t flags; uint32_t fam; uint32_t n; const float *prio; } QCI;
typedef struct { int sType; const void *pNext; uint32_t flags; uint32_t nq; const QCI *q; uint32_t nl; const char *const *l; uint32_t ne; const char *const *e; const void *feat; } DevCI;
typedef struct { int sType; const void *pNext; uint32_t flags; size_t size; const uint32_t *code; } SMCI;
typedef struct { uint32_t binding; int type; uint32_t count; uint32_t stages; const void *imm; } DSLB;
typedef struct { int sType; const void *pNext; uint32_t flags; uint32_t n; const DSLB *b; } DSLCI;
typedef struct { uint32_t stages; uint32_t off; uint32_t size; } PCR;
typedef struct { int sType; const void *pNext; uint32_t flags; uint32_t nsl; const H *sl; uint32_t npc; const PCR *pc; } PLCI;
typedef struct { int sType; const void *pNext; uint32_t flags; uint32_t stage; H module; const char *name; const void *spec; } PSSCI;
typedef struct { int sType; const void *pNext; uint32_t flags; PSSCI stage; H layout; H base; int32_t bidx; } CPCI;
/* VkPhysicalDeviceVulkan13Features: sType 54, 15 VkBool32 */
typedef struct { int sType; void *pNext; uint32_t f[15]; } V13F;
/* VkPhysicalDeviceVulkan12Features: sType 51, 47 VkBool32 */
typedef struct { int sType; void *pNext; uint32_t f[47]; } V12F;
typedef struct { int sType; void *pNext; uint32_t f[12]; } V11F; /* sType 49 */
typedef struct { int sType; void *pNext; uint32_t f[55]; } F2; /* sType 1000059000 */
int main(int argc, char **argv) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  GIPA gipa = (GIPA)dlsym(lib, "vkGetInstanceProcAddr");
  VkResult (*createInstance)(const InstCI *, const void *, H *) = (void *)gipa(0, "vkCreateInstance");
  AppInfo ai = {0, 0, "vkc", 1, "vkc", 1, (1u << 22) | (3u << 12)};
  InstCI ici = {1, 0, 0, &ai, 0, 0, 0, 0};
  H inst; if (createInstance(&ici, 0, &inst)) { fprintf(stderr, "instance\n"); return 1; }
  VkResult (*enumPD)(H, uint32_t *, H *) = (void *)gipa(inst, "vkEnumeratePhysicalDevices");
  uint32_t n = 4; H pds[4]; enumPD(inst, &n, pds);
  if (!n) { fprintf(stderr, "no device\n"); return 1; }
  void (*getF2)(H, F2 *) = (void *)gipa(inst, "vkGetPhysicalDeviceFeatures2");
  V13F f13 = {54, 0}; V12F f12 = {51, &f13}; V11F f11 = {49, &f12}; F2 f2 = {1000059000, &f11};
  getF2(pds[0], &f2); f2.f[0] = 0; f13.f[0] = 0;
  float prio = 1; QCI q = {2, 0, 0, 0, 1, &prio};
  DevCI dci = {3, &f2, 0, 1, &q, 0, 0, 0, 0, 0};
  VkResult (*createDevice)(H, const DevCI *, const void *, H *) = (void *)gipa(inst, "vkCreateDevice");
  H dev; VkResult r = createDevice(pds[0], &dci, 0, &dev); if (r) { fprintf(stderr, "device %d\n", r); return 1; }
  VkResult (*createSM)(H, const SMCI *, const void *, H *) = (void *)gipa(inst, "vkCreateShaderModule");
  VkResult (*createDSL)(H, const DSLCI *, const void *, H *) = (void *)gipa(inst, "vkCreateDescriptorSetLayout");
  VkResult (*createPL)(H, const PLCI *, const void *, H *) = (void *)gipa(inst, "vkCreatePipelineLayout");
  VkResult (*createCP)(H, H, uint32_t, const CPCI *, const void *, H *) = (void *)gipa(inst, "vkCreateComputePipelines");
  DSLB b[8]; for (int i = 0; i < 8; i++) { b[i].binding = i; b[i].type = 7; b[i].count = 1; b[i].stages = 0x20; b[i].imm = 0; }
  DSLCI dsl = {32, 0, 0, 8, b}; H sl; if (createDSL(dev, &dsl, 0, &sl)) { fprintf(stderr, "dsl\n"); return 1; }
  PCR pc = {0x20, 0, 128}; PLCI plci = {30, 0, 0, 1, &sl, 1, &pc}; H pl; if (createPL(dev, &plci, 0, &pl)) { fprintf(stderr, "pl\n"); return 1; }
  for (int a = 1; a < argc; a++) {
    FILE *f = fopen(argv[a], "rb"); if (!f) { perror(argv[a]); continue; }
    fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
    uint32_t *code = malloc(sz); fread(code, 1, sz, f); fclose(f);
    SMCI smci = {16, 0, 0, (size_t)sz, code}; H sm; if (createSM(dev, &smci, 0, &sm)) { fprintf(stderr, "sm\n"); continue; }
    CPCI cp = {29, 0, 0, {18, 0, 0, 0x20, sm, "main", 0}, pl, 0, -1};
    H pipe; fprintf(stderr, "== %s\n", argv[a]); fflush(stderr);
    r = createCP(dev, 0, 1, &cp, 0, &pipe); printf("%s: pipeline %d\n", argv[a], r); fflush(stdout);
  }
  return 0;
}
