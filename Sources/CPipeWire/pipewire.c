// See cpipewire.h. The headers' inline helpers (pods, interface methods) need nothing from the library; the few
// exported functions are looked up with dlsym, so the daemon starts where libpipewire is not installed.

#include "cpipewire.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipewire/pipewire.h>
#include <spa/param/props.h>
#include <spa/pod/builder.h>
#include <spa/pod/parser.h>

// Since PipeWire 0.3.68; Debian 12's headers (0.3.65) do not name them. The same values in 1.4.
#define AUDIOD_PROP_volumeRampSamples 0x10012
#define AUDIOD_PROP_volumeRampStepSamples 0x10013
#define AUDIOD_PROP_volumeRampScale 0x10016
#define AUDIOD_VOLUME_RAMP_LINEAR 1

struct lib {
    void *handle;
    void (*init)(int *, char ***);
    struct pw_loop *(*loop_new)(const struct spa_dict *);
    void (*loop_destroy)(struct pw_loop *);
    struct pw_context *(*context_new)(struct pw_loop *, struct pw_properties *, size_t);
    void (*context_destroy)(struct pw_context *);
    struct pw_core *(*context_connect)(struct pw_context *, struct pw_properties *, size_t);
    int (*core_disconnect)(struct pw_core *);
    void (*proxy_destroy)(struct pw_proxy *);
    struct pw_properties *(*properties_new)(const char *, ...);
    struct pw_impl_module *(*context_load_module)(struct pw_context *, const char *, const char *,
                                                  struct pw_properties *);
};

#define MAX_NODES 256

struct bound {
    uint32_t id;
    struct pw_proxy *proxy;
    // Subscribed to the node's Props: the factor it last reported, once it has.
    struct spa_hook listener;
    int watching;
    int factor_known;
    float factor;
};

static void release(audiod_pw *pw, struct bound *b);

struct audiod_pw {
    struct lib lib;
    struct pw_loop *loop;
    struct pw_context *context;
    struct pw_core *core;
    struct pw_registry *registry;
    struct spa_hook core_listener;
    int state;
    int done;
    char version[64];
    char error[256];
    struct bound nodes[MAX_NODES];
};

static int load(struct lib *l, char *error, size_t size) {
    l->handle = dlopen("libpipewire-0.3.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!l->handle) {
        snprintf(error, size, "libpipewire-0.3.so.0 cannot be opened: %s", dlerror());
        return -1;
    }
#define SYM(field, name)                                                                                             \
    do {                                                                                                             \
        *(void **)(&l->field) = dlsym(l->handle, name);                                                              \
        if (!l->field) {                                                                                             \
            snprintf(error, size, "libpipewire-0.3.so.0 has no %s", name);                                           \
            dlclose(l->handle);                                                                                      \
            l->handle = NULL;                                                                                        \
            return -1;                                                                                               \
        }                                                                                                            \
    } while (0)
    SYM(init, "pw_init");
    SYM(loop_new, "pw_loop_new");
    SYM(loop_destroy, "pw_loop_destroy");
    SYM(context_new, "pw_context_new");
    SYM(context_destroy, "pw_context_destroy");
    SYM(context_connect, "pw_context_connect");
    SYM(core_disconnect, "pw_core_disconnect");
    SYM(proxy_destroy, "pw_proxy_destroy");
    SYM(properties_new, "pw_properties_new");
    SYM(context_load_module, "pw_context_load_module");
#undef SYM
    return 0;
}

static void on_info(void *data, const struct pw_core_info *info) {
    struct audiod_pw *pw = data;
    if (info && info->version) snprintf(pw->version, sizeof pw->version, "%s", info->version);
    if (pw->state == 0) pw->state = 1;
}

static void on_done(void *data, uint32_t id, int seq) {
    struct audiod_pw *pw = data;
    if (id == PW_ID_CORE && seq > pw->done) pw->done = seq;
}

static void on_error(void *data, uint32_t id, int seq, int res, const char *message) {
    struct audiod_pw *pw = data;
    snprintf(pw->error, sizeof pw->error, "object %u: %s (%s)", id, message ? message : "", strerror(-res));
    // An error about one of audiod's objects (a node that went away while bound, whose id the server may already
    // have given to another: "unknown resource", ENOENT) leaves the rest working; any other error of the core
    // itself ends the connection (EPIPE: the server went away).
    if (id == PW_ID_CORE && res != -ENOENT) pw->state = -1;
}

static const struct pw_core_events core_events = {
    PW_VERSION_CORE_EVENTS,
    .info = on_info,
    .done = on_done,
    .error = on_error,
};

void audiod_pw_close(audiod_pw *pw) {
    if (!pw) return;
    for (int i = 0; i < MAX_NODES; i++)
        if (pw->nodes[i].proxy) release(pw, &pw->nodes[i]);
    if (pw->registry) pw->lib.proxy_destroy((struct pw_proxy *)pw->registry);
    if (pw->core) {
        spa_hook_remove(&pw->core_listener);
        pw->lib.core_disconnect(pw->core);
    }
    if (pw->context) pw->lib.context_destroy(pw->context);
    if (pw->loop) pw->lib.loop_destroy(pw->loop);
    // The library stays loaded: libpipewire keeps global state that dlclose would leave dangling.
    free(pw);
}

audiod_pw *audiod_pw_open(const char *remote, char *error, size_t error_size) {
    static struct lib shared;
    static int loaded = 0;
    if (!loaded) {
        if (load(&shared, error, error_size) < 0) return NULL;
        shared.init(NULL, NULL);
        loaded = 1;
    }
    audiod_pw *pw = calloc(1, sizeof *pw);
    if (!pw) {
        snprintf(error, error_size, "out of memory");
        return NULL;
    }
    pw->lib = shared;
    pw->loop = pw->lib.loop_new(NULL);
    if (!pw->loop) {
        snprintf(error, error_size, "pw_loop_new failed: %s", strerror(errno));
        audiod_pw_close(pw);
        return NULL;
    }
    // No client.conf: its modules include module-rt, which would set the calling thread's (audiod's loop's) nice
    // level over audiod's own `nice-level`. Only the native protocol is needed, to reach the server. Without a
    // config, libpipewire warns on stderr at every start (no context.modules, no RT for its data thread), which
    // would read as trouble in audiod's journal: only its errors are printed, unless PIPEWIRE_DEBUG asks for more
    // (the context honours it over log.level). Nothing here uses D-Bus, so its support plugin is not loaded.
    pw->context = pw->lib.context_new(
        pw->loop,
        pw->lib.properties_new("config.name", "null", "log.level", "1", "support.dbus", "false", NULL), 0);
    if (!pw->context) {
        snprintf(error, error_size, "pw_context_new failed: %s", strerror(errno));
        audiod_pw_close(pw);
        return NULL;
    }
    if (!pw->lib.context_load_module(pw->context, "libpipewire-module-protocol-native", NULL, NULL)) {
        snprintf(error, error_size, "PipeWire's native protocol module cannot be loaded: %s", strerror(errno));
        audiod_pw_close(pw);
        return NULL;
    }
    struct pw_properties *props = remote ? pw->lib.properties_new(PW_KEY_REMOTE_NAME, remote, NULL) : NULL;
    pw->core = pw->lib.context_connect(pw->context, props, 0);
    if (!pw->core) {
        snprintf(error, error_size, "cannot connect to PipeWire%s%s: %s", remote ? " at " : "", remote ? remote : "",
                 strerror(errno));
        audiod_pw_close(pw);
        return NULL;
    }
    pw_core_add_listener(pw->core, &pw->core_listener, &core_events, pw);
    pw->registry = pw_core_get_registry(pw->core, PW_VERSION_REGISTRY, 0);
    if (!pw->registry) {
        snprintf(error, error_size, "cannot get PipeWire's registry: %s", strerror(errno));
        audiod_pw_close(pw);
        return NULL;
    }
    return pw;
}

int audiod_pw_fd(audiod_pw *pw) { return pw_loop_get_fd(pw->loop); }

void audiod_pw_dispatch(audiod_pw *pw) {
    pw_loop_enter(pw->loop);
    pw_loop_iterate(pw->loop, 0);
    pw_loop_leave(pw->loop);
}

int audiod_pw_state(audiod_pw *pw) { return pw->state; }
const char *audiod_pw_server_version(audiod_pw *pw) { return pw->version; }
const char *audiod_pw_last_error(audiod_pw *pw) { return pw->error; }
int audiod_pw_done(audiod_pw *pw) { return pw->done; }

static struct bound *find(audiod_pw *pw, uint32_t node, int make) {
    struct bound *free_slot = NULL;
    for (int i = 0; i < MAX_NODES; i++) {
        if (pw->nodes[i].proxy && pw->nodes[i].id == node) return &pw->nodes[i];
        if (!pw->nodes[i].proxy && !free_slot) free_slot = &pw->nodes[i];
    }
    if (!make || !free_slot) return NULL;
    struct pw_proxy *proxy = pw_registry_bind(pw->registry, node, PW_TYPE_INTERFACE_Node, PW_VERSION_NODE, 0);
    if (!proxy) return NULL;
    free_slot->id = node;
    free_slot->proxy = proxy;
    return free_slot;
}

static void release(audiod_pw *pw, struct bound *b) {
    if (b->watching) spa_hook_remove(&b->listener);
    b->watching = 0;
    b->factor_known = 0;
    pw->lib.proxy_destroy(b->proxy);
    b->proxy = NULL;
}

void audiod_pw_release(audiod_pw *pw, uint32_t node) {
    struct bound *b = find(pw, node, 0);
    if (b) release(pw, b);
}

static void on_node_param(void *data, int seq, uint32_t id, uint32_t index, uint32_t next,
                          const struct spa_pod *param) {
    struct bound *b = data;
    (void)seq;
    (void)index;
    (void)next;
    if (id != SPA_PARAM_Props || !param) return;
    float volume = -1.0f;
    // A node may report several Props objects; only one carries the factor.
    if (spa_pod_parse_object(param, SPA_TYPE_OBJECT_Props, NULL, SPA_PROP_volume, SPA_POD_OPT_Float(&volume)) < 0)
        return;
    if (volume < 0.0f) return;
    b->factor = volume;
    b->factor_known = 1;
}

static const struct pw_node_events node_events = {
    PW_VERSION_NODE_EVENTS,
    .param = on_node_param,
};

int audiod_pw_watch_factor(audiod_pw *pw, uint32_t node) {
    if (pw->state != 1) return -EPIPE;
    struct bound *b = find(pw, node, 1);
    if (!b) return -ENOSPC;
    b->factor_known = 0;
    if (!b->watching) {
        pw_node_add_listener((struct pw_node *)b->proxy, &b->listener, &node_events, b);
        uint32_t ids[1] = {SPA_PARAM_Props};
        pw_node_subscribe_params((struct pw_node *)b->proxy, ids, 1);
        b->watching = 1;
    }
    return 0;
}

int audiod_pw_factor(audiod_pw *pw, uint32_t node, float *factor) {
    struct bound *b = find(pw, node, 0);
    if (!b || !b->watching) return -1;
    if (!b->factor_known) return 0;
    *factor = b->factor;
    return 1;
}

int audiod_pw_set_volume(audiod_pw *pw, uint32_t node, float volume, int32_t ramp_samples, int32_t step_samples,
                         int mute, const float *channel_volumes, uint32_t n_channels) {
    if (pw->state != 1) return -EPIPE;
    struct bound *b = find(pw, node, 1);
    if (!b) return -ENOSPC;
    uint8_t buffer[1024];
    struct spa_pod_builder builder = SPA_POD_BUILDER_INIT(buffer, sizeof buffer);
    struct spa_pod_frame frame;
    spa_pod_builder_push_object(&builder, &frame, SPA_TYPE_OBJECT_Props, SPA_PARAM_Props);
    spa_pod_builder_prop(&builder, SPA_PROP_volume, 0);
    spa_pod_builder_float(&builder, volume);
    if (mute == 0 || mute == 1) {
        spa_pod_builder_prop(&builder, SPA_PROP_mute, 0);
        spa_pod_builder_bool(&builder, mute == 1);
    }
    if (channel_volumes && n_channels > 0) {
        if (n_channels > 64) return -EINVAL;
        spa_pod_builder_prop(&builder, SPA_PROP_channelVolumes, 0);
        spa_pod_builder_array(&builder, sizeof(float), SPA_TYPE_Float, n_channels, channel_volumes);
    }
    if (ramp_samples > 0) {
        // A ramp without a step size takes pipewire-pulse down (1.4.2): the step is always sent.
        spa_pod_builder_prop(&builder, AUDIOD_PROP_volumeRampSamples, 0);
        spa_pod_builder_int(&builder, ramp_samples);
        spa_pod_builder_prop(&builder, AUDIOD_PROP_volumeRampStepSamples, 0);
        spa_pod_builder_int(&builder, step_samples > 0 ? step_samples : 1);
        spa_pod_builder_prop(&builder, AUDIOD_PROP_volumeRampScale, 0);
        spa_pod_builder_id(&builder, AUDIOD_VOLUME_RAMP_LINEAR);
    }
    struct spa_pod *param = spa_pod_builder_pop(&builder, &frame);
    if (!param) return -ENOSPC;
    int res = pw_node_set_param((struct pw_node *)b->proxy, SPA_PARAM_Props, 0, param);
    if (res < 0) return res;
    return pw_core_sync(pw->core, PW_ID_CORE, 0);
}
