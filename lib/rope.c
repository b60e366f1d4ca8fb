#include "rope.h"

#include <math.h>

void rope_inv_freq(const model_config_t *c, rope_table_t table, float *out) {
    int rd = c->rope_dim, half = rd / 2;
    double base = table == ROPE_MAIN ? c->rope_theta : c->compress_rope_theta;
    bool yarn = table == ROPE_COMPRESS && c->yarn;
    double lo = 0, hi = 0;
    if (yarn) { /* correction range: dims whose wavelength spans beta_fast / beta_slow turns */
        double orig = (double)c->yarn_original_max_pos, two_log_base = 2 * log(base);
        lo = floor(rd * log(orig / (c->yarn_beta_fast * 2 * M_PI)) / two_log_base);
        hi = ceil(rd * log(orig / (c->yarn_beta_slow * 2 * M_PI)) / two_log_base);
        if (lo < 0) lo = 0;
        if (hi > rd - 1) hi = rd - 1;
        if (lo == hi) hi += 0.001;
    }
    for (int p = 0; p < half; p++) {
        float pos_freq = powf((float)base, (float)(2 * p) / (float)rd);
        float extrap = 1.0f / pos_freq;
        if (!yarn) {
            out[p] = extrap;
            continue;
        }
        float interp = 1.0f / ((float)c->yarn_factor * pos_freq);
        float ramp = ((float)p - (float)lo) / (float)(hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float extrap_factor = 1.0f - ramp;
        out[p] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
    }
}
