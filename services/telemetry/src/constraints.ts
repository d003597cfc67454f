import { DomainError, validationFailed, type ConstraintRules } from '@lab/kit';

/** Constraints of this schema that state a business rule, and their answers. */
export const RULES: ConstraintRules = {
  environmental_points_external_code_key: () => DomainError.conflict('another point of this organisation has this external_code', 'external_code_taken'),
  environmental_points_limits_order: () => validationFailed([{ path: 'limit_min', message: 'limit_min must not exceed limit_max' }]),
  connectors_name_key: () => DomainError.conflict('another connector of this organisation has this name', 'connector_name_taken'),
  devices_identifier_key: () => DomainError.conflict('another device of this organisation has this identifier', 'device_identifier_taken'),
};
