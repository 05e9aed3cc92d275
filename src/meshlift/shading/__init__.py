"""Materials and lights for physically based shading (nvdiffrec's split-sum model), in pure PyTorch.

Modules:
    color           sRGB <-> linear transfer curves, the log-sRGB tone map of the HDR image loss
    bsdf            Lambert and GGX microfacet BSDF pieces, nvdiffrec's ``pbr`` BSDF
    brdf_lut        the split-sum DFG lookup table, computed in code (Karis 2013)
    cubemap         cube-map directions, texel solid angles, seamless bilinear/mip sampling, lat-long maps
    light           ``EnvironmentLight``: learnable HDR cube map, GGX-prefiltered mips, diffuse irradiance
    encoding        multiresolution hash-grid encoding (instant-ngp) and a small MLP
    material_field  volumetric neural material field x -> (kd, ks, normal perturbation)
    normals         shading-normal preparation (normal map perturbation, two-sided, bent normals)
    procedural      procedural HDR environment maps (studio, sky)
"""
