"""The resource model: ModelService and ScalingPolicy documents, validated and as CRDs.

Pure: no I/O and no clock (import-linter enforces it); files are servectl.specfile's job.

Modules (import the module, not its names):
    models      pydantic models of the documents (a package: one private module per part of
                the document, every name re-exported); AutoscalingSpec.to_config() -> engine
                config
    validation  load_model_service / load_scaling_policy / load_document -> model or SpecError
    crd         generate_crds(): structural CRDs derived from the models; the field reference
    conditions  analysis checks: compile_condition / evaluate_condition (CEL), render_query
"""
