/* Loads libsisci.so at run time, as some SISCI programs do, and calls it through the
 * vendor's exported names (_SISCI_PUBLIC_FUNC_ST_/_MT_). Usage: dlopen PATH/libsisci.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <sisci_api.h>

typedef void (*init_fn)(unsigned int, sci_error_t *);
typedef void (*open_fn)(sci_desc_t *, unsigned int, sci_error_t *);
typedef void (*close_fn)(sci_desc_t, unsigned int, sci_error_t *);
typedef const char *(*string_fn)(sci_error_t);
typedef void (*node_fn)(unsigned int, unsigned int *, unsigned int, sci_error_t *);
typedef void (*term_fn)(void);

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("FAIL dlsym %s: %s\n", name, dlerror());
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: %s LIBSISCI\n", argv[0]);
        return 1;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("FAIL dlopen: %s\n", dlerror());
        return 1;
    }
    init_fn init = (init_fn)sym(lib, "_SISCI_PUBLIC_FUNC_ST_SCIInitialize");
    open_fn open_ = (open_fn)sym(lib, "_SISCI_PUBLIC_FUNC_ST_SCIOpen");
    close_fn close_ = (close_fn)sym(lib, "_SISCI_PUBLIC_FUNC_MT_SCIClose");
    string_fn str = (string_fn)sym(lib, "_SISCI_PUBLIC_FUNC_MT_SCIGetErrorString");
    node_fn node = (node_fn)sym(lib, "_SISCI_PUBLIC_FUNC_ST_SCIGetLocalNodeId");
    term_fn term = (term_fn)sym(lib, "SCITerminate");
    if (!init || !open_ || !close_ || !str || !node || !term) return 1;

    sci_error_t err = SCI_ERR_SYSTEM;
    sci_desc_t sd = NULL;
    init(0, &err);
    if (err != SCI_ERR_OK) { printf("FAIL SCIInitialize: %s\n", str(err)); return 1; }
    open_(&sd, 0, &err);
    if (err != SCI_ERR_OK || sd == NULL) { printf("FAIL _SISCI_PUBLIC_FUNC_ST_SCIOpen: %s\n", str(err)); return 1; }
    unsigned int id = 0;
    node(0, &id, 0, &err);
    if (err != SCI_ERR_OK) { printf("FAIL SCIGetLocalNodeId: %s\n", str(err)); return 1; }
    close_(sd, 0, &err);
    if (err != SCI_ERR_OK) { printf("FAIL SCIClose: %s\n", str(err)); return 1; }
    printf("error string of SCI_ERR_TIMEOUT: %s\n", str(SCI_ERR_TIMEOUT));
    term();
    printf("ok: opened through _SISCI_PUBLIC_FUNC_ST_SCIOpen as node %u\n", id);
    dlclose(lib);
    return 0;
}
