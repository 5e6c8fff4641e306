/*
 * prop_conv.c: sharding propagation through convolution, mapped like a
 * dot (prop_dot.c): f32[8,32,32,16] b01f input {devices=[2,1,1,1]0,1}
 * (batch split) gives the output batch split, and back; the input
 * feature and the kernel input feature are contracted.
 */
#include "prop_internal.h"

/* Convolution, mapped like a dot: batch <-> batch and spatial <-> spatial
 * (input side), kernel output feature <-> output feature (kernel side);
 * input feature and kernel input feature are contracted. A convolution
 * of feature groups keeps the batch map (each image its own, as the
 * partitioner runs it: spmd_conv.c) but not the features' (an output
 * feature reads its group's input features); one of batch groups keeps
 * only the spatial map (its batch dim mixes groups). A depthwise
 * convolution under data parallelism lost its batch tiling here and ran
 * whole on every device: a MobileNet-style block on 2 devices gathered
 * its 9600-byte input and held 87336 bytes a device, 6.8x the batch plan. */
static bool conv_maps(const IrInstr *x, const IrShape *in, const IrShape *k, int64_t *from_in,
                      int64_t *from_k)
{
    const IrConvDnums *c = &x->a.x->conv;
    int32_t r = x->shape.rank;
    if (!c->present || in->rank != r || k->rank != r)
        return false;
    for (int32_t i = 0; i < r; i++)
        from_in[i] = from_k[i] = -1;
    bool feature_groups = x->a.x->feature_group_count > 1, batch_groups = x->a.x->batch_group_count > 1;
    if (c->out_batch < 0 || c->out_batch >= r || c->out_feature < 0 || c->out_feature >= r)
        return false;
    if (!batch_groups)
        from_in[c->out_batch] = c->in_batch;
    if (!feature_groups && !batch_groups)
        from_k[c->out_feature] = c->k_out_feature;
    for (int32_t s = 0; s < c->nspatial; s++)
        if (c->out_spatial[s] >= 0 && c->out_spatial[s] < r)
            from_in[c->out_spatial[s]] = c->in_spatial[s];
    return true;
}

static IrStatus conv_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    return prop_maps_fwd(p, g, k, s, os, conv_maps);
}

static IrStatus conv_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s, const IrShape *us)
{
    return prop_maps_bwd(p, u, k, g, s, us, conv_maps);
}

const PropRule prop_rule_convolution = {.fwd = conv_fwd, .bwd = conv_bwd};
