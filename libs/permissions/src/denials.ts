import { DomainError } from '@lab/kit';
import { may, rolesThatMay, type Action, type Caller } from './model.js';
import { mayWriteRecord, type RecordRow, type RecordRule } from './records.js';

/**
 * The 403 a caller gets for an action it may not take, worded once for every
 * service. `what` names the thing acted on, as the message shows it ("lab
 * orders", "a device", "experiments"); each action has its default.
 */
export function denial(caller: Caller, action: Action, what?: string): DomainError {
  const role = caller.role ?? 'caller';
  switch (action) {
    case 'read':
    case 'read_all_departments':
      return DomainError.forbidden(`the ${role} role cannot read ${what ?? 'records'}`);
    case 'write':
    case 'write_any_record':
    case 'write_department_records':
    case 'write_unassigned_records':
    case 'write_own_records':
      return DomainError.forbidden(`the ${role} role cannot change ${what ?? 'records'}`);
    case 'delete':
      return DomainError.forbidden(`deleting ${what ?? 'records'} needs an administrator role`);
    case 'sign':
      if (!caller.user_id) return DomainError.forbidden(`only a signed-in user can sign ${what ?? 'experiments'}`);
      return DomainError.forbidden(`the ${role} role cannot sign ${what ?? 'experiments'}`);
    case 'release_result': {
      if (!caller.user_id) {
        return DomainError.forbidden('releasing a result with a token without a user needs the admin scope', 'forbidden', { required_scope: 'admin' });
      }
      const roles = rolesThatMay('release_result');
      return DomainError.forbidden(`releasing a result needs the ${roles.join(' or ')} role`, 'forbidden', { required_roles: roles });
    }
    case 'administer':
      return DomainError.forbidden(`${what ?? 'this'} needs an administrator`, 'admin_required');
  }
}

/** Throws the action's 403 (denial) unless the caller may take it. */
export function assertMay(caller: Caller, action: Action, what?: string): void {
  if (!may(caller, action)) throw denial(caller, action, what);
}

/** The 403 of a record the caller may not change (`what`: its resource, "sample"). */
export const recordWriteDenied = (what: string): DomainError => DomainError.forbidden(`no permission to change this ${what}`);

/** Throws 403 unless the caller may write at all and may change `row` (mayWriteRecord). */
export function assertMayWriteRecord(caller: Caller, row: RecordRow, rule: RecordRule, what: string): void {
  assertMay(caller, 'write');
  if (!mayWriteRecord(caller, row, rule)) throw recordWriteDenied(what);
}
