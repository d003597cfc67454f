import { BlockedAddressError, resolveAllowed, validationFailed, type Resolver } from '@lab/kit';

/**
 * A subscription's receiver must be a public address (unless private networks are
 * allowed): refused when it is registered or changed, with a 400 naming the url,
 * rather than accepted and then blocked at every delivery. The check at delivery
 * stays (it pins the address it checked, so a name that resolves elsewhere later,
 * DNS rebinding, still cannot reach a private address); this one only tells the
 * operator early. A name that does not resolve now is accepted: its DNS record may
 * come later, and the delivery-time check covers it.
 */
export async function assertPublicReceiver(url: string, allowPrivate: boolean, resolver?: Resolver): Promise<void> {
  if (allowPrivate || !URL.canParse(url)) return; // a malformed url is the body validation's 400
  const { hostname } = new URL(url);
  try {
    await resolveAllowed(hostname, false, resolver);
  } catch (err) {
    if (!(err instanceof BlockedAddressError)) return;
    throw validationFailed(
      [{ path: 'url', message: `must reach a public address: ${err.message} (loopback, private, link-local and metadata addresses are refused)` }],
      'webhook receivers must be public addresses',
    );
  }
}
